package framework

import (
	"encoding/json"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
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

// JSONCodec returns the default codec, encoding/json.
func JSONCodec() Codec { return jsonCodec{} }

type jsonCodec struct{}

func (jsonCodec) Name() string                       { return "json" }
func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// encode turns a payload into bytes and the encoding header value ("" for JSON).
func encode(c Codec, payload any) ([]byte, string, error) { return taskmsg.Encode(c, payload) }
