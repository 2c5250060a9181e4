package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Reading a fan-out's results: the steps after a ForEach step, and the
// progress a run's status shows (fanout.go).

// resultReaders bounds the concurrent reads of one [Results] call.
const resultReaders = 32

// ItemResults returns the results of ForEach step step, in item order: each
// item's value decoded into an R, or its error (wrapping [ErrItemFailed])
// with [CollectErrors]. The calling step must depend on step, directly or
// transitively. It reads one message per item, 32 at a time.
//
// Errors: [ErrNotInStep] outside a step handler, [ErrNoOutput] for a step
// that is not an ancestor, not a ForEach step or whose results expired,
// or a read or decoding error.
func ItemResults[R any](ctx context.Context, step string) ([]ItemResult[R], error) {
	sc := fromContext(ctx)
	if sc == nil {
		return nil, ErrNotInStep
	}
	if !sc.info.Compensation {
		if cur := sc.def.step(sc.info.Step); cur == nil || !cur.ancestors[step] {
			return nil, fmt.Errorf("%w: step %q does not depend on %q (declare it with workflow.After)", ErrNoOutput, sc.info.Step, step)
		}
	}
	sd := sc.def.step(step)
	st := sc.run.Step(step)
	if sd == nil || sd.fan == nil || st == nil || st.State != StepDone {
		return nil, fmt.Errorf("%w: step %q of run %s is no completed ForEach step", ErrNoOutput, step, sc.info.RunID)
	}
	out := make([]ItemResult[R], st.Items)
	errs := make([]error, st.Items)
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(resultReaders, st.Items) {
		wg.Go(func() {
			for i := range next {
				subj := sc.store.outSubject(sc.info.RunID, step, i)
				data, _, err := sc.store.last(ctx, subj, false)
				if err == nil && data == nil {
					// A replica may lag behind the leader that stored it.
					data, _, err = sc.store.last(ctx, subj, true)
				}
				var res itemResult
				switch {
				case err != nil:
					errs[i] = fmt.Errorf("workflow: read the result of item %d of step %s: %w", i, step, err)
				case data == nil:
					errs[i] = fmt.Errorf("%w: result of item %d of step %s of run %s is gone (expired after the workflow's retention, or purged)", ErrNoOutput, i, step, sc.info.RunID)
				case json.Unmarshal(data, &res) != nil:
					errs[i] = fmt.Errorf("%w: result of item %d of step %s", errCorrupt, i, step)
				case res.Error != "":
					out[i].Err = fmt.Errorf("%w: item %d: %s", ErrItemFailed, i, res.Error)
				default:
					if err := decode(res.Value, &out[i].Value); err != nil {
						errs[i] = fmt.Errorf("workflow: decode the result of item %d of step %s into %T: %w", i, step, out[i].Value, err)
					}
				}
			}
		})
	}
	for i := range st.Items {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Results returns the results of ForEach step step, in item order, decoded
// into Rs. When an item failed ([CollectErrors]) it returns an error
// wrapping [ErrItemFailed]; use [ItemResults] to see every item's outcome.
// Otherwise it is [ItemResults].
func Results[R any](ctx context.Context, step string) ([]R, error) {
	all, err := ItemResults[R](ctx, step)
	if err != nil {
		return nil, err
	}
	vals := make([]R, len(all))
	var errs []error
	for i, r := range all {
		vals[i] = r.Value
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("workflow: %d of %d items of step %s failed: %w", len(errs), len(all), step, errors.Join(errs...))
	}
	return vals, nil
}

// progress fills in ItemsDone and ItemsFailed of the fanning-out steps of
// r from their fan-out states.
func (s *store) progress(ctx context.Context, r *Run) error {
	for _, st := range r.Steps {
		if st.State != StepFanningOut {
			continue
		}
		fs, err := s.loadFan(ctx, r.ID, st.Name, false)
		if err != nil {
			return err
		}
		if fs != nil {
			st.ItemsDone, st.ItemsFailed = fs.Done, fs.Failed
		}
	}
	return nil
}

// fanDone sets the item counts of ForEach step st, which completed with
// output out (a [FanOut]).
func fanDone(st *StepStatus, out json.RawMessage) {
	var fo FanOut
	if json.Unmarshal(out, &fo) == nil {
		st.Items, st.ItemsDone, st.ItemsFailed = fo.Items, fo.Items, fo.Failed
	}
}
