package streamdefs

import (
	"errors"
	"fmt"
	"time"
)

// Limits of workflow events.
const (
	// MaxEventKeyLen is the longest event key, in bytes.
	MaxEventKeyLen = 200
	// MaxEventBytes is the largest event payload, in bytes. The event
	// stream refuses larger messages (its MaxMsgSize leaves room for
	// headers).
	MaxEventBytes = 64 << 10
	// DefaultEventRetention is how long the event stream keeps an event:
	// an event published before a run starts waiting for it is found
	// when the wait begins, within this window.
	DefaultEventRetention = 7 * 24 * time.Hour
)

// ErrInvalidEventKey reports an event key that cannot be used (see
// [ValidateEventKey]).
var ErrInvalidEventKey = errors.New("streams: invalid event key")

// ValidateEventKey checks an event key: 1 to [MaxEventKeyLen] bytes of
// tokens separated by single dots, each made of ASCII letters, digits and
// '_', '-', '=', ':', '/', for example "payment.confirmed.order-42" or
// "payment.confirmed/order-42". The key becomes a subject. The error wraps
// [ErrInvalidEventKey].
func ValidateEventKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidEventKey)
	}
	if len(key) > MaxEventKeyLen {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidEventKey, len(key), MaxEventKeyLen)
	}
	tok := 0
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == '.':
			if i == tok {
				return fmt.Errorf("%w: %q has an empty token at byte %d", ErrInvalidEventKey, key, i)
			}
			tok = i + 1
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '_', c == '-', c == '=', c == ':', c == '/':
		default:
			return fmt.Errorf("%w: %q contains %q at byte %d (allowed: A-Z a-z 0-9 _ - = : / and . between tokens)",
				ErrInvalidEventKey, key, rune(c), i)
		}
	}
	if tok == len(key) {
		return fmt.Errorf("%w: %q ends with a dot", ErrInvalidEventKey, key)
	}
	return nil
}
