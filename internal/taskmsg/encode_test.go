package taskmsg

import (
	"encoding/json"
	"errors"
	"testing"
)

type fakeCodec struct {
	name string
	err  error
}

func (c fakeCodec) Name() string { return c.name }
func (c fakeCodec) Marshal(v any) ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	b, _ := json.Marshal(v)
	return append([]byte(c.name+":"), b...), nil
}

func TestEncode(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		codec    fakeCodec
		payload  any
		data     string
		encoding string
		err      error
	}{
		{"bytes are raw whatever the codec", fakeCodec{name: "json"}, []byte("x"), "x", EncodingRaw, nil},
		{"bytes are raw with another codec", fakeCodec{name: "msgpack"}, []byte("x"), "x", EncodingRaw, nil},
		{"raw JSON kept by the JSON codec", fakeCodec{name: "json"}, json.RawMessage(`{"a":1}`), `{"a":1}`, "", nil},
		{"raw JSON encoded by another codec", fakeCodec{name: "msgpack"}, json.RawMessage(`1`), "msgpack:1", "msgpack", nil},
		{"nil is empty for JSON", fakeCodec{name: "json"}, nil, "", "", nil},
		{"nil is encoded by another codec", fakeCodec{name: "msgpack"}, nil, "msgpack:null", "msgpack", nil},
		{"JSON values have no encoding header", fakeCodec{name: "json"}, 7, "json:7", "", nil},
		{"other codecs name themselves", fakeCodec{name: "msgpack"}, 7, "msgpack:7", "msgpack", nil},
		{"codec errors are returned", fakeCodec{name: "json", err: boom}, 7, "", "", boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, enc, err := Encode(tc.codec, tc.payload)
			if !errors.Is(err, tc.err) || string(data) != tc.data || enc != tc.encoding {
				t.Fatalf("Encode = %q, %q, %v; want %q, %q, %v", data, enc, err, tc.data, tc.encoding, tc.err)
			}
		})
	}
}

func TestReservedHeader(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]bool{
		"":              true,
		"Nats-Rollup":   true,
		"nats-msg-id":   true,
		"NATS-X":        true,
		"Jetflow-Id":    true,
		"JETFLOW-x":     true,
		"X-Tenant":      false,
		"Nats":          false,
		"Jetflow":       false,
		"X-Nats-Rollup": false,
		"Natsy-Header":  false,
		"traceparent":   false,
	} {
		if got := ReservedHeader(key); got != want {
			t.Errorf("ReservedHeader(%q) = %v, want %v", key, got, want)
		}
	}
}
