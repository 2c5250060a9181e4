// Package jsonw appends JSON values to byte slices exactly as encoding/json
// encodes them (HTML-safe strings, RFC 3339 times), without reflection: for
// the documents the module writes on every task or step.
package jsonw

import (
	"bytes"
	"encoding/json"
	"time"
)

// String appends s as a JSON string. Strings of plain printable
// ASCII are copied; anything else goes through encoding/json.
func String(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			if err != nil {
				return append(b, `""`...)
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Time appends t as a JSON string in RFC 3339 with nanoseconds.
func Time(b []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		q, err := t.MarshalJSON()
		if err != nil {
			return append(b, `""`...)
		}
		return append(b, q...)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// Raw appends the raw JSON value v as encoding/json does: with <, >,
// &, U+2028 and U+2029 escaped inside strings. A value from json.Marshal
// has them escaped already and is appended as is.
func Raw(b, v []byte) []byte {
	escape := false
	for _, c := range v {
		// 0xE2 starts U+2028 and U+2029 (and other characters, escaped
		// as encoding/json would: not at all).
		if c == '<' || c == '>' || c == '&' || c == 0xE2 {
			escape = true
			break
		}
	}
	if !escape {
		return append(b, v...)
	}
	var buf bytes.Buffer
	json.HTMLEscape(&buf, v)
	return append(b, buf.Bytes()...)
}
