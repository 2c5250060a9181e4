package testutil

import (
	"bytes"
	"sync"
)

// LogBuffer is a log destination that the goroutines of the code under
// test and the test itself may write and read at once (bytes.Buffer is not
// safe for that). The zero value is empty and ready to use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
