package staterec

import (
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// Progress is what a handler reported of its progress: Done units of work
// out of Total (0 when the total is unknown), and a short message.
type Progress struct {
	Done, Total int64
	Message     string
}

// IsZero reports whether p is the zero value, which a record leaves out.
func (p Progress) IsZero() bool { return p == Progress{} }

// MaxProgressMessage is the longest progress message, in bytes.
const MaxProgressMessage = 256

// ProgressInterval is how often a task's progress is written at most: the
// latest value reported in between wins.
const ProgressInterval = time.Second

// CheckProgress says what is wrong with p, or returns nil: negative counts,
// Done above a known Total, a message longer than [MaxProgressMessage]
// bytes, not UTF-8, or holding control characters (it is shown on
// terminals and web pages as one line). The same rules apply to what a
// handler reports and to what a reader finds in a record.
func CheckProgress(p Progress) error {
	switch {
	case p.Done < 0 || p.Total < 0:
		return fmt.Errorf("done %d of %d: counts must not be negative", p.Done, p.Total)
	case p.Total > 0 && p.Done > p.Total:
		return fmt.Errorf("done %d is more than the total %d", p.Done, p.Total)
	case len(p.Message) > MaxProgressMessage:
		return fmt.Errorf("message of %d bytes, the limit is %d", len(p.Message), MaxProgressMessage)
	case !utf8.ValidString(p.Message):
		return fmt.Errorf("message is not valid UTF-8")
	}
	for _, r := range p.Message {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return fmt.Errorf("message holds the control character %U", r)
		}
	}
	return nil
}
