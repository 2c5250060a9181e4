package framework

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// Codec encodes task payloads on enqueue and decodes them for typed handlers.
// Implementations must be safe for concurrent use.
type Codec interface {
	// Name identifies the codec on the wire (header Jetflow-Encoding). "json"
	// and "raw" are reserved.
	Name() string
	// Marshal encodes a payload given to [Client.Enqueue].
	Marshal(v any) ([]byte, error)
	// Unmarshal decodes a payload into the value a typed handler receives.
	Unmarshal(data []byte, v any) error
}

// StrictCodec is a [Codec] that can also decode strictly, for handlers
// registered with [StrictPayload].
type StrictCodec interface {
	Codec
	// UnmarshalStrict decodes like Unmarshal, but fails when data holds a
	// field v has no place for, or anything after the value.
	UnmarshalStrict(data []byte, v any) error
}

// JSONCodec returns the default codec, encoding/json. It implements
// [StrictCodec]: UnmarshalStrict refuses unknown object fields (at any
// depth, as json.Decoder.DisallowUnknownFields does) and data after the
// value.
func JSONCodec() Codec { return jsonCodec{} }

type jsonCodec struct{}

func (jsonCodec) Name() string                       { return "json" }
func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

func (jsonCodec) UnmarshalStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("json: data after the payload's value")
	}
	return nil
}
