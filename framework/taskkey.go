package framework

import (
	"fmt"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// A task's key names who or what it is for (a tenant, an account, a
// customer), for the features that limit or share work per key: package
// keylimit caps the tasks of one key running at once across the cluster.
// It travels in the header [HeaderKey]; a task without one has no key.

// WithKey gives the task key k: 1 to [MaxKeyLen] bytes of printable UTF-8
// (no control characters, no spaces at either end, which its header would
// lose). It is independent of [Ordered]'s ordering key.
func WithKey(k string) EnqueueOption {
	return func(c *enqueueConfig) error {
		if err := taskmsg.ValidateKey(k); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		c.SetHeader(HeaderKey, k)
		return nil
	}
}

// Key returns the task's key ([WithKey]), "" when it has none. The value
// comes from the wire: the features that use it check it as [WithKey] does
// before it becomes a KV key or a subject.
func (t *Task) Key() string { return t.Header(HeaderKey) }
