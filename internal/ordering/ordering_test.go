package ordering

import (
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"a", "order 42", "~!", strings.Repeat("x", MaxKeyLen)} {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	for _, k := range []string{"", strings.Repeat("x", MaxKeyLen+1), "a\nb", "é", "\x7f"} {
		if err := ValidateKey(k); err == nil {
			t.Errorf("ValidateKey(%q) = nil, want an error", k)
		}
	}
}

func TestSlotIsStableAndInRange(t *testing.T) {
	t.Parallel()
	// FNV-1a of "a" is 0xe40c292c: the slot a stored task was published to
	// must not change between versions.
	if got := Slot("a", 256); got != 0x2c {
		t.Errorf("Slot(a) = %d, want %d", got, 0x2c)
	}
	for _, k := range []string{"a", "b", "order-1", "order-2"} {
		if s := Slot(k, 256); s < 0 || s >= 256 || s != Slot(k, 256) {
			t.Errorf("Slot(%q) = %d", k, s)
		}
	}
}
