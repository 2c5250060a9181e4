package taskmsg

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Marshaler is the part of a payload codec that encodes: its wire name
// ("json" for the default codec) and its marshal function.
type Marshaler interface {
	Name() string
	Marshal(v any) ([]byte, error)
}

// Encode turns a payload into bytes and the encoding header value: "" for
// JSON, [EncodingRaw] for a payload given as bytes, the codec's name
// otherwise. A json.RawMessage or nil payload is taken as is by the JSON
// codec.
func Encode(c Marshaler, payload any) ([]byte, string, error) {
	switch p := payload.(type) {
	case []byte:
		return p, EncodingRaw, nil
	case json.RawMessage:
		if c.Name() == "json" {
			return p, "", nil
		}
	case nil:
		if c.Name() == "json" {
			return nil, "", nil
		}
	}
	b, err := c.Marshal(payload)
	if err != nil {
		return nil, "", err
	}
	if c.Name() == "json" {
		return b, "", nil
	}
	return b, c.Name(), nil
}

// ReservedHeader reports whether a custom header key is empty or reserved:
// keys starting with "Nats-" or "Jetflow-", in any case.
func ReservedHeader(key string) bool {
	return key == "" || hasFoldPrefix(key, "nats-") || hasFoldPrefix(key, "jetflow-")
}

// CheckHeader checks a custom header set on a task message: its key must
// not be reserved ([ReservedHeader]) and must be an HTTP header token, and
// its value must have no line break and at most maxValue bytes.
func CheckHeader(key, value string, maxValue int) error {
	if ReservedHeader(key) {
		return fmt.Errorf("header %q is empty or reserved (Nats-*, Jetflow-*)", key)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("header key %q is not a token", key)
		}
	}
	if len(value) > maxValue || strings.ContainsAny(value, "\r\n") {
		return fmt.Errorf("header %s: value has a line break or exceeds %d bytes", key, maxValue)
	}
	return nil
}

func hasFoldPrefix(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}
