package streams

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// FairStream returns the name of the stream where tasks enqueued with fair
// shares (package fairness) wait for their turn: "JETFLOW_FAIR" by default.
// Package fairness creates it on first use, with the task stream's storage
// and replicas.
func (n Names) FairStream() string { return n.upper + "_FAIR" }

// FairWildcard returns the subject matching every staged task:
// "<prefix>.fair.>".
func (n Names) FairWildcard() string { return n.prefix + ".fair.>" }

// FairKeys returns the subject matching the staged tasks of every key of
// taskType at priority p: "<prefix>.fair.<type>.<priority>.*".
func (n Names) FairKeys(p Priority, taskType string) string {
	return n.prefix + ".fair." + taskType + "." + p.String() + ".*"
}

// FairSubject returns the subject where a task of taskType, priority p and
// key waits for its turn: "<prefix>.fair.<type>.<priority>.<key>", the key
// in unpadded base64url (a key may hold any printable character). The key
// must be valid (framework.ValidateKey).
func (n Names) FairSubject(p Priority, taskType, key string) string {
	return n.prefix + ".fair." + taskType + "." + p.String() + "." + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// ParseFairSubject parses a subject made by [Names.FairSubject] into its
// priority, task type and key. The key is decoded but not validated. The
// error wraps [ErrInvalidSubject], [ErrInvalidPriority] or
// [ErrInvalidTaskType].
func (n Names) ParseFairSubject(subject string) (Priority, string, string, error) {
	rest, ok := strings.CutPrefix(subject, n.prefix+".fair.")
	if !ok {
		return 0, "", "", fmt.Errorf("%w: %q does not start with %q", ErrInvalidSubject, subject, n.prefix+".fair.")
	}
	rest, tok, ok := cutLast(rest)
	if !ok {
		return 0, "", "", fmt.Errorf("%w: %q has no key", ErrInvalidSubject, subject)
	}
	taskType, ps, ok := cutLast(rest)
	if !ok {
		return 0, "", "", fmt.Errorf("%w: %q has no priority", ErrInvalidSubject, subject)
	}
	p, err := ParsePriority(ps)
	if err != nil {
		return 0, "", "", err
	}
	if err := ValidateTaskType(taskType); err != nil {
		return 0, "", "", err
	}
	key, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	if err != nil || len(key) == 0 {
		return 0, "", "", fmt.Errorf("%w: %q: the key token is not unpadded base64url", ErrInvalidSubject, subject)
	}
	return p, taskType, string(key), nil
}

// cutLast cuts s around its last '.', ok false when there is none or a
// side is empty.
func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '.')
	if i <= 0 || i == len(s)-1 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}
