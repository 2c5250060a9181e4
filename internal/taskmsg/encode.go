package taskmsg

import "encoding/json"

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
