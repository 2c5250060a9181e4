package taskmsg

import (
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"acme", "tenant 42", "ключ", strings.Repeat("k", MaxKeyLen), "a.b*c>"} {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	for _, k := range []string{"", strings.Repeat("k", MaxKeyLen+1), "bad\xff", "tab\there", "del\x7f", "c1\u0085", " lead", "trail "} {
		if err := ValidateKey(k); err == nil {
			t.Errorf("ValidateKey(%q) = nil, want an error", k)
		}
	}
}
