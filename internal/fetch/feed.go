package fetch

import (
	"sync/atomic"

	"github.com/jetflow-io/jetflow/internal/pull"
)

// Feed publishes a fetcher's live pull iterator (nil between iterators) to
// the executors running its tasks, which take the next message of its
// buffer directly when a slot frees up and no task waits for it.
type Feed struct{ it atomic.Pointer[pull.Iter] }

// Iter returns the fetcher's live iterator, nil between two iterators and
// once the fetcher stopped.
func (f *Feed) Iter() *pull.Iter { return f.it.Load() }
