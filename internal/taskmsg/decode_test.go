package taskmsg

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// named is a codec name for Decode.
type named string

func (n named) Name() string { return string(n) }

func TestDecode(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	fail := func([]byte, any) error { return boom }
	long := strings.Repeat("é", 40) // 80 bytes
	for _, tc := range []struct {
		name, codec, enc, payload string
		unmarshal                 func([]byte, any) error
		want                      string // the value decoded
		wantEnc, wantErr          string // wantErr: part of the error, "" for none
	}{
		{name: "json", codec: "json", payload: `"hi"`, want: "hi"},
		{name: "json named", codec: "json", enc: "json", payload: `"hi"`, want: "hi"},
		{name: "empty payload", codec: "json", enc: "json", want: ""},
		{name: "raw to a string", codec: "json", enc: EncodingRaw, payload: "x", wantEnc: EncodingRaw, wantErr: "payload is raw bytes"},
		{name: "raw codec", codec: EncodingRaw, enc: EncodingRaw, payload: `"hi"`, want: "hi"},
		{name: "another codec", codec: "json", enc: "msgpack", payload: "x", wantEnc: "msgpack", wantErr: `codec "msgpack" but the worker uses "json"`},
		{name: "long encoding cut", codec: "json", enc: long, payload: "x", wantEnc: long[:64], wantErr: "was encoded with codec"},
		{name: "codec error", codec: "json", payload: "x", unmarshal: fail, wantEnc: "json", wantErr: "boom"},
		{name: "codec error, named", codec: "cbor", enc: "cbor", payload: "x", unmarshal: fail, wantEnc: "cbor", wantErr: "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unmarshal := tc.unmarshal
			if unmarshal == nil {
				unmarshal = json.Unmarshal
			}
			var v string
			enc, err := Decode(named(tc.codec), unmarshal, tc.enc, []byte(tc.payload), &v)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Decode: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Decode: %v, want an error saying %q", err, tc.wantErr)
			case tc.wantErr == "" && v != tc.want:
				t.Fatalf("decoded %q, want %q", v, tc.want)
			case enc != tc.wantEnc:
				t.Fatalf("encoding %q, want %q", enc, tc.wantEnc)
			}
			if tc.unmarshal != nil && !errors.Is(err, boom) {
				t.Fatalf("the codec's error is not kept: %v", err)
			}
		})
	}
}

// A []byte receives the payload whatever its encoding.
func TestDecodeBytes(t *testing.T) {
	t.Parallel()
	var b []byte
	if enc, err := Decode(named("json"), nil, EncodingRaw, []byte{0xff, 0}, &b); err != nil || enc != "" || string(b) != "\xff\x00" {
		t.Fatalf("Decode into []byte = %q, %q, %v", b, enc, err)
	}
}

// Whatever the wire holds, Decode does not panic and reports the codec's
// name, or at most 64 bytes of valid UTF-8 cut from the encoding.
func FuzzDecode(f *testing.F) {
	f.Add("json", "", []byte(`{"a":1}`))
	f.Add("json", "raw", []byte("x"))
	f.Add("cbor", strings.Repeat("é", 40), []byte("x"))
	f.Fuzz(func(t *testing.T, codec, enc string, payload []byte) {
		var v map[string]any
		got, err := Decode(named(codec), json.Unmarshal, enc, payload, &v)
		if err == nil && got != "" {
			t.Fatalf("encoding %q without an error", got)
		}
		if enc == "" && got != "" && got != codec {
			t.Fatalf("encoding %q reported for a payload that names none (codec %q)", got, codec)
		}
		if enc != "" && (len(got) > 64 || !strings.HasPrefix(enc, got) || (utf8.ValidString(enc) && !utf8.ValidString(got))) {
			t.Fatalf("encoding %q reported for %q", got, enc)
		}
	})
}
