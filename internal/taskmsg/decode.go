package taskmsg

import (
	"fmt"

	"github.com/jetflow-io/jetflow/internal/textcut"
)

// Named is the part of a payload codec that names it on the wire
// (its Jetflow-Encoding header value; "json" for the default codec).
type Named interface {
	Name() string
}

// maxEncoding bounds the encoding named in an error: it comes from the
// wire.
const maxEncoding = 64

// Decode decodes a task's payload into v, the reverse of [Encode]. A
// *[]byte v receives the payload as it is. Otherwise the payload's
// encoding (enc, its [HeaderEncoding]: "" for JSON) must be the codec's:
// a payload marked [EncodingRaw], or encoded by another codec, is an
// error, and unmarshal (the codec's decoding function) decodes the rest.
// An empty payload leaves v as it is (the zero value).
//
// Its error is the codec's error as it is, or says why the payload cannot
// be decoded; it comes with the encoding to report: enc cut to 64 bytes,
// or the codec's name when the payload names none.
func Decode(c Named, unmarshal func([]byte, any) error, enc string, payload []byte, v any) (string, error) {
	if pb, ok := v.(*[]byte); ok {
		*pb = payload
		return "", nil
	}
	enc = textcut.Cut(enc, maxEncoding)
	name := c.Name()
	if enc == EncodingRaw && name != EncodingRaw {
		return enc, fmt.Errorf("payload is raw bytes; only a []byte payload can receive it")
	}
	if enc != "" && enc != EncodingRaw && enc != name {
		return enc, fmt.Errorf("payload was encoded with codec %q but the worker uses %q", enc, name)
	}
	if len(payload) == 0 {
		return "", nil // zero value
	}
	if err := unmarshal(payload, v); err != nil {
		if enc == "" {
			enc = name
		}
		return enc, err
	}
	return "", nil
}
