package jsapi

import (
	"errors"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestParsePubAck reads the server's forms without encoding/json and
// leaves every other form to decodePubAck.
func TestParsePubAck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		data string
		want *jetstream.PubAck // nil: not read here
	}{
		{`{"stream":"S","seq":1}`, &jetstream.PubAck{Stream: "S", Sequence: 1}},
		{`{"stream":"jetflow_tasks_p3","seq":18446744073709551}`, &jetstream.PubAck{Stream: "jetflow_tasks_p3", Sequence: 18446744073709551}},
		{`{"stream":"S","seq":7,"duplicate": true}`, &jetstream.PubAck{Stream: "S", Sequence: 7, Duplicate: true}},
		{`{"stream":"S","domain":"hub","seq":1}`, nil},
		{`{"stream":"S","seq":7,"duplicate":true}`, nil},
		{`{"stream":"S", "seq":1}`, nil},
		{`{"stream":"S","seq":1} `, nil},
		{`{"stream":"S","seq":}`, nil},
		{`{"stream":"S","seq":01}`, nil},
		{`{"stream":"S","seq":-1}`, nil},
		{`{"stream":"S","seq":10000000000000000000}`, nil}, // 20 digits
		{`{"stream":"S\"x","seq":1}`, nil},
		{`{"stream":"S\u0041","seq":1}`, nil},
		{`{"stream":"","seq":1}`, nil},
		{"{\"stream\":\"S\x01\",\"seq\":1}", nil},
		{`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`, nil},
		{``, nil},
	} {
		got, ok := parsePubAck([]byte(c.data), "S")
		if ok != (c.want != nil) || (ok && *got != *c.want) {
			t.Errorf("parsePubAck(%s) = %+v, %v; want %+v", c.data, got, ok, c.want)
		}
	}
}

// TestParsePubAckSharesStreamName: an acknowledgement naming the expected
// stream does not allocate its name.
func TestParsePubAckSharesStreamName(t *testing.T) {
	data := []byte(`{"stream":"S","seq":1}`)
	if n := testing.AllocsPerRun(100, func() { parsePubAck(data, "S") }); n > 1 {
		t.Errorf("%v allocations per acknowledgement of the expected stream, want 1 (the PubAck)", n)
	}
	if ack, _ := parsePubAck(data, "T"); ack.Stream != "S" {
		t.Errorf("stream %q, want the acknowledgement's S", ack.Stream)
	}
}

// TestDecodePubAck keeps nats.go's errors for what parsePubAck leaves.
func TestDecodePubAck(t *testing.T) {
	t.Parallel()
	_, err := decodePubAck([]byte(`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`))
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.ErrorCode != 10077 {
		t.Errorf("API error: %v, want an APIError with code 10077", err)
	}
	for _, data := range []string{`not json`, `{}`, `{"seq":1}`, `{"stream":"","seq":1}`} {
		if _, err := decodePubAck([]byte(data)); !errors.Is(err, jetstream.ErrInvalidJSAck) {
			t.Errorf("decodePubAck(%s) = %v, want ErrInvalidJSAck", data, err)
		}
	}
	ack, err := decodePubAck([]byte(`{"stream":"S","domain":"hub","seq":3,"duplicate":true}`))
	if err != nil || *ack != (jetstream.PubAck{Stream: "S", Domain: "hub", Sequence: 3, Duplicate: true}) {
		t.Errorf("decodePubAck with a domain = %+v, %v", ack, err)
	}
}

// FuzzParsePubAck: whatever parsePubAck reads, encoding/json reads the
// same way.
func FuzzParsePubAck(f *testing.F) {
	for _, s := range []string{`{"stream":"S","seq":1}`, `{"stream":"S","seq":7,"duplicate": true}`,
		`{"stream":"S","seq":12345678901234567890}`, `{"stream":"a\"b","seq":1}`, `{"stream":"S","seq":1,"duplicate": false}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := parsePubAck(data, "S")
		if !ok {
			return
		}
		want, err := decodePubAck(data)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("parsePubAck(%q) = %+v; encoding/json: %+v, %v", data, got, want, err)
		}
	})
}
