package framework

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// A task's key names who or what it is for (a tenant, an account, a
// customer), for the features that limit or share work per key: package
// keylimit caps the tasks of one key running at once across the cluster.
// It travels in the header [HeaderKey]; a task without one has no key.

// WithKey gives the task key k: 1 to [MaxKeyLen] bytes of printable UTF-8
// (no control characters). It is independent of [Ordered]'s ordering key.
func WithKey(k string) EnqueueOption {
	return func(c *enqueueConfig) error {
		if err := ValidateKey(k); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		if c.headers == nil {
			c.headers = make(map[string]string, 2)
		}
		c.headers[HeaderKey] = k
		return nil
	}
}

// ValidateKey reports whether k can be a task key ([WithKey]).
func ValidateKey(k string) error {
	if k == "" || len(k) > MaxKeyLen {
		return fmt.Errorf("task key of %d bytes, want 1 to %d", len(k), MaxKeyLen)
	}
	if !utf8.ValidString(k) {
		return fmt.Errorf("task key %q is not UTF-8", truncate(k, 32))
	}
	for _, r := range k {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("task key %q contains the control character %U", truncate(k, 32), r)
		}
	}
	if strings.TrimSpace(k) != k {
		// A header value loses them on the wire: the handler would see
		// another key than the producer gave.
		return fmt.Errorf("task key %q starts or ends with a space, which its header does not keep", truncate(k, 32))
	}
	return nil
}

// Key returns the task's key ([WithKey]), "" when it has none. The value
// comes from the wire: check it with [ValidateKey] before it becomes a KV
// key or a subject.
func (t *Task) Key() string { return t.Header(HeaderKey) }
