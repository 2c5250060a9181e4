package taskmsg

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jetflow-io/jetflow/internal/textcut"
)

// MaxKeyLen is the longest task key (framework.WithKey), in bytes.
const MaxKeyLen = 128

// ValidateKey reports whether k can be a task key (framework.WithKey): 1 to
// [MaxKeyLen] bytes of UTF-8 without control characters, and without
// spaces at either end, which a header value loses on the wire. A key read
// from the wire (Task.Key) is checked with it before it becomes a KV key or
// a subject.
func ValidateKey(k string) error {
	if k == "" || len(k) > MaxKeyLen {
		return fmt.Errorf("task key of %d bytes, want 1 to %d", len(k), MaxKeyLen)
	}
	if !utf8.ValidString(k) {
		return fmt.Errorf("task key %q is not UTF-8", textcut.Cut(k, 32))
	}
	for _, r := range k {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("task key %q contains the control character %U", textcut.Cut(k, 32), r)
		}
	}
	if strings.TrimSpace(k) != k {
		// A header value loses them on the wire: the handler would see
		// another key than the producer gave.
		return fmt.Errorf("task key %q starts or ends with a space, which its header does not keep", textcut.Cut(k, 32))
	}
	return nil
}
