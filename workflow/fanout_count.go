package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/nats-io/nats.go"
)

// Counting a fan-out's items: each once, the next released in the same
// guarded write, the step completed by the write that counts the last
// (fanout.go; decision 044).

// count counts item i (failed: its result is an error) in the fan-out
// state, releasing the next item, and completes the step when i was the
// last. An item counted already only sends the tasks in flight again.
func (rt *runtime) count(ctx, sctx context.Context, t *framework.Task, d *Definition, sd *stepDef, r *Run, i int, failed bool) error {
	fs, next, unsure, err := rt.countLocked(sctx, d, sd, r.ID, i, failed)
	switch {
	case err != nil:
		return err
	case fs == nil && (t.Attempt > 1 || unsure):
		// Counted already, by this task's previous delivery (which may
		// have died before sending the task it released) or by a write
		// of this one whose answer was lost.
		return rt.releaseAgain(sctx, t, d, sd, r)
	case fs == nil:
		return nil
	}
	if err := rt.store.publishTasks(sctx, next); err != nil {
		// Sent again when this task is redelivered (releaseAgain).
		return fmt.Errorf("workflow: release the next item of step %s of run %s: %w", sd.name, r.ID, err)
	}
	if fs.Done < fs.Total {
		return nil
	}
	return rt.completeFanOut(ctx, sctx, t, d, sd, r.ID, fs)
}

// countLocked counts item i under the worker's lock of the fan-out and
// returns the state written and the task it released; a nil state when
// the item was counted already (unsure: maybe by a write of this call
// whose answer was lost). The items of one fan-out that finish on
// one worker count one at a time (a striped lock): they would only
// conflict on the guard otherwise, and each conflict costs a read and a
// retry (with 200 in flight, a fifth of the rate). The guard still orders
// the counts of different workers.
func (rt *runtime) countLocked(ctx context.Context, d *Definition, sd *stepDef, runID string, i int, failed bool) (fs *fanState, next []*nats.Msg, unsure bool, err error) {
	lock := rt.counting.lock(runID, sd.name)
	lock.Lock()
	defer lock.Unlock()
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, countWriteTimeout)
		fs, err := rt.store.loadFan(rctx, runID, sd.name, attempt > 0)
		cancel()
		if err != nil && ctx.Err() == nil && attempt < maxConflictRetries && !errors.Is(err, errCorrupt) {
			// Unanswered or refused during a leader change: try again.
			if !backOff(ctx, attempt) {
				return nil, nil, unsure, ctx.Err()
			}
			continue
		}
		if err != nil {
			return nil, nil, unsure, fmt.Errorf("workflow: read the fan-out of step %s of run %s: %w", sd.name, runID, err)
		}
		if fs == nil || i >= fs.Total {
			return nil, nil, unsure, framework.Permanent(fmt.Errorf("%w: run %s: fan-out of step %s has no item %d (its state expired, or was purged)", ErrNoOutput, runID, sd.name, i))
		}
		if fs.counted(i) {
			return nil, nil, unsure, nil
		}
		fs.Counted[i/8] |= 1 << (i % 8)
		fs.Done++
		if failed {
			fs.Failed++
		}
		var next []*nats.Msg
		if fs.Released < fs.Total {
			next = append(next, itemTask(rt, d, runID, sd.name, fs.Released))
			fs.Released++
		}
		data, err := json.Marshal(fs)
		if err != nil {
			return nil, nil, unsure, err
		}
		// A write whose answer is lost (a leader change) is not waited
		// for as long as ctx allows: other items wait for the lock. It is
		// read again from the leader, which says whether it was stored.
		pctx, cancel := context.WithTimeout(ctx, countWriteTimeout)
		_, err = rt.put(pctx, d, rt.store.fanSubject(runID, sd.name), data, fs.seq)
		cancel()
		if err == nil {
			return fs, next, unsure, nil
		}
		if !errors.Is(err, errConflict) {
			if ctx.Err() != nil || attempt >= maxConflictRetries {
				return nil, nil, true, fmt.Errorf("workflow: count item %d of step %s of run %s: %w", i, sd.name, runID, err)
			}
			unsure = true
		}
		if attempt >= maxConflictRetries {
			return nil, nil, unsure, fmt.Errorf("%w: fan-out %s of run %s after %d attempts", ErrConflict, sd.name, runID, attempt+1)
		}
		if !backOff(ctx, attempt) {
			return nil, nil, unsure, fmt.Errorf("workflow: count item %d of step %s of run %s: %w", i, sd.name, runID, ctx.Err())
		}
	}
}

// countWriteTimeout bounds one read and one write of a fan-out's count.
const countWriteTimeout = 5 * time.Second

// countLocks serialise the counts of the fan-outs of one worker: a fan-out
// always takes the same of its 64 locks.
type countLocks [64]sync.Mutex

func (l *countLocks) lock(runID, step string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(runID))
	h.Write([]byte(step))
	return &l[h.Sum32()%uint32(len(l))]
}

// completeFanOut completes the ForEach step whose items are all counted:
// the run document records its output, and the steps after it are
// enqueued, once (the document's guard decides among concurrent callers).
// A step chained after it runs on t, under ctx.
func (rt *runtime) completeFanOut(ctx, sctx context.Context, t *framework.Task, d *Definition, sd *stepDef, runID string, fs *fanState) error {
	out, _ := json.Marshal(FanOut{Items: fs.Total, Failed: fs.Failed})
	r, err := rt.store.load(sctx, runID)
	if err != nil {
		return loadErr(t, err)
	}
	st := r.Step(sd.name)
	if st == nil || st.State != StepFanningOut {
		// Completed already: its children may still lack their tasks.
		return rt.resend(sctx, t, d, r, sd.name)
	}
	r, chained, err := rt.recordDone(sctx, d, sd, r, out, st.Attempts, st.StartedAt)
	if err != nil {
		return err
	}
	return rt.runChain(ctx, sctx, t, d, r, chained)
}
