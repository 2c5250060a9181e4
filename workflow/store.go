package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/asyncpub"
	"github.com/jetflow-io/jetflow/internal/retry"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Headers of workflow task messages.
const (
	// HeaderRun carries the run ID on every step and compensation task.
	HeaderRun = "Jetflow-Run"
)

// errConflict is an optimistic-concurrency failure: the run document changed
// since it was read.
var errConflict = errors.New("workflow: run document changed concurrently")

// errTasksNotSent reports a commit whose document was stored but whose tasks
// were not all published.
var errTasksNotSent = errors.New("workflow: run document stored, but its new tasks were not all sent")

// maxConflictRetries bounds the re-reads of one update under contention.
const maxConflictRetries = 200

// store reads and writes run documents on the run stream
// ([streams.Names.RunStream]). It is safe for concurrent use.
type store struct {
	js    jetstream.JetStream
	nc    *nats.Conn
	names streams.Names
	runs  string // the run stream's name, which acknowledgements share

	defs map[string]*Definition // for each workflow's retention

	mu     sync.Mutex
	stream jetstream.Stream
}

func newStore(js jetstream.JetStream, names streams.Names, defs map[string]*Definition) *store {
	return &store{js: js, nc: js.Conn(), names: names, runs: names.RunStream(), defs: defs}
}

// retention returns how long a final document of workflow wf is kept.
func (s *store) retention(wf string) time.Duration {
	if d := s.defs[wf]; d != nil {
		return d.retention
	}
	return DefaultRetention
}

func (s *store) runStream(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stream != nil {
		return s.stream, nil
	}
	st, err := s.js.Stream(ctx, s.names.RunStream())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("workflow: %w: %w", framework.ErrTopologyMissing, err)
		}
		return nil, fmt.Errorf("workflow: run stream %s: %w", s.names.RunStream(), err)
	}
	s.stream = st
	return st, nil
}

// load reads the current document of run id. It returns an error wrapping
// [ErrRunNotFound] when there is none. It uses a direct get, which any
// replica may answer: on a replicated stream the document can lag behind the
// tasks the leader delivers. Use loadLeader where a stale document would be
// taken for a decision.
func (s *store) load(ctx context.Context, id string) (*Run, error) {
	st, err := s.runStream(ctx)
	if err != nil {
		return nil, err
	}
	m, err := st.GetLastMsgForSubject(ctx, s.names.RunSubject(id))
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, fmt.Errorf("%w: %s", ErrRunNotFound, id)
		}
		return nil, fmt.Errorf("workflow: read run %s: %w", id, err)
	}
	return decodeRecalled(id, m.Data, m.Sequence)
}

// holds reports whether stream holds a message on subject (a direct get).
func (s *store) holds(ctx context.Context, stream, subject string) (bool, error) {
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		return false, err
	}
	_, err = st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, err
}

// loadLeader reads the current document of run id from the stream leader,
// which has every committed write (the stream message get API, not a direct
// get).
func (s *store) loadLeader(ctx context.Context, id string) (*Run, error) {
	data, seq, err := s.lastFromLeader(ctx, s.names.RunSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: read run %s: %w", id, err)
	}
	return decodeRecalled(id, data, seq)
}

// lastFromLeader reads the last message on subject of the run stream from
// the stream leader. It returns an error wrapping jetstream.ErrMsgNotFound
// when there is none.
func (s *store) lastFromLeader(ctx context.Context, subject string) ([]byte, uint64, error) {
	if _, err := s.runStream(ctx); err != nil {
		return nil, 0, err
	}
	req, err := json.Marshal(map[string]string{"last_by_subj": subject})
	if err != nil {
		return nil, 0, err
	}
	prefix := s.js.Options().APIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	resp, err := s.nc.RequestWithContext(ctx, prefix+"STREAM.MSG.GET."+s.names.RunStream(), req)
	if err != nil {
		return nil, 0, err
	}
	var r struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Data []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, 0, fmt.Errorf("invalid response: %w", err)
	}
	switch {
	case r.Error != nil && r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, 0, jetstream.ErrMsgNotFound
	case r.Error != nil:
		return nil, 0, r.Error
	case r.Message == nil:
		return nil, 0, errors.New("empty response")
	}
	return r.Message.Data, r.Message.Seq, nil
}

// errCorrupt reports a run document that does not decode or does not pass
// checkRun. It never gets better by reading it again.
var errCorrupt = errors.New("workflow: corrupt run document")

// decodeRun decodes the document of run id stored at sequence seq and
// checks it (see checkRun): documents come from the wire, and whoever may
// publish on the run subjects could have written it.
func decodeRun(id string, data []byte, seq uint64) (*Run, error) {
	r := new(Run)
	err := json.Unmarshal(data, r)
	if err == nil {
		err = checkRun(id, r)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: run %s at sequence %d: %w", errCorrupt, id, seq, err)
	}
	r.Revision = seq
	return r, nil
}

// decodeRecalled is decodeRun through the process's document memo (docs):
// bytes it holds for run id are not decoded again, and bytes it decodes
// replace them.
func decodeRecalled(id string, data []byte, seq uint64) (*Run, error) {
	if r := docs.recall(id, data); r != nil {
		r.Revision = seq
		return r, nil
	}
	r, err := decodeRun(id, data, seq)
	if err == nil {
		docs.remember(id, data, r)
	}
	return r, err
}

// checkRun refuses a document whose ID is not id, or whose steps could not
// have been written by this package: a missing step, or a step name or
// dependency that is not a valid step name (they become task types, subjects
// and message IDs when tasks are re-sent).
func checkRun(id string, r *Run) error {
	if r.ID != id {
		return fmt.Errorf("document of run %q stored under %q", r.ID, id)
	}
	if len(r.Steps) > MaxSteps {
		return fmt.Errorf("%d steps, the limit is %d", len(r.Steps), MaxSteps)
	}
	if err := checkParent(r.Parent); err != nil {
		return err
	}
	for i, st := range r.Steps {
		if st == nil {
			return fmt.Errorf("step %d is null", i)
		}
		if err := validateName(st.Name, true); err != nil {
			return err
		}
		for _, a := range st.After {
			if err := validateName(a, true); err != nil {
				return err
			}
		}
		// Completions number the steps that completed, 1 to n; the next
		// is one more than the largest (a huge one would wrap and reorder
		// the compensations).
		if st.Completion < 0 || st.Completion > len(r.Steps) {
			return fmt.Errorf("step %s: completion %d out of 0..%d", st.Name, st.Completion, len(r.Steps))
		}
		if st.Attempts < 0 || st.CompensationAttempts < 0 {
			return fmt.Errorf("step %s: negative attempt count", st.Name)
		}
		if st.Items < 0 || st.Items > MaxItems || st.ItemsDone < 0 || st.ItemsFailed < 0 {
			return fmt.Errorf("step %s: item counts out of 0..%d", st.Name, MaxItems)
		}
		if st.ChildRun != "" && validateRunID(st.ChildRun) != nil {
			return fmt.Errorf("step %s: child run %q is no valid run ID", st.Name, st.ChildRun)
		}
	}
	return nil
}

// errMismatch reports a run document that a task of a workflow may not act
// on: a run of another workflow, or one whose steps are not the
// definition's (see checkDefinition). It never gets better by reading it
// again.
var errMismatch = errors.New("workflow: run document does not match the workflow definition")

// checkDefinition refuses a document that is not a run of d as d declares
// it: the run of another workflow, a step d does not declare or one listed
// twice, dependencies other than the step's, or a compensation the step
// does not have. The document chooses the tasks a commit sends: a step or
// compensation outside d would get a task type that no worker consumes,
// which stays in the task stream for good, and a task of d acting on
// another workflow's run would run d's step on that run's input. A run
// started before its definition changed fails this check too (changing the
// steps of a workflow with runs in flight is not supported).
func checkDefinition(d *Definition, r *Run) error {
	if r.Workflow != d.name {
		return fmt.Errorf("%w: run %s is a run of workflow %q, not %q", errMismatch, r.ID, r.Workflow, d.name)
	}
	seen := make([]bool, len(d.steps)) // by declaration
	for _, st := range r.Steps {
		sd := d.step(st.Name)
		switch {
		case sd == nil:
			return fmt.Errorf("%w: run %s has a step %q that workflow %s does not declare", errMismatch, r.ID, st.Name, d.name)
		case seen[sd.declaration]:
			// Only the first would ever settle: the run could not end.
			return fmt.Errorf("%w: run %s lists step %q twice", errMismatch, r.ID, st.Name)
		case !slices.Equal(st.After, sd.after):
			return fmt.Errorf("%w: run %s: step %q runs after %q, workflow %s declares %q", errMismatch, r.ID, st.Name, st.After, d.name, sd.after)
		case (st.Compensable || st.State == StepCompensating) && sd.compensate == nil:
			return fmt.Errorf("%w: run %s: step %q has no compensation in workflow %s", errMismatch, r.ID, st.Name, d.name)
		}
		seen[sd.declaration] = true
	}
	return nil
}

// commit stores r, expecting the previous document at sequence expect (0: no
// document), and then publishes tasks. On success it sets r.Revision. It
// returns errConflict when the document changed since expect, and an error
// wrapping errTasksNotSent when the document was stored but not every task.
// The run stream keeps one message per subject, so the new revision
// replaces the previous one. A final run gets a message TTL of its
// workflow's retention, so the server deletes it after that.
//
// The document and the tasks live in two streams, so they cannot commit
// atomically: a crash between the two leaves a document that says steps are
// enqueued without their tasks, which is repaired when the unacknowledged
// task that made the change is redelivered (see runtime.resend), or by
// starting the run again ([Client.Start] with the same [WithRunID]).
func (s *store) commit(ctx context.Context, r *Run, expect uint64, tasks []*nats.Msg) error {
	data, verbatim, err := encodeRun(r)
	if err != nil {
		return fmt.Errorf("workflow: encode run %s: %w", r.ID, err)
	}
	doc := &nats.Msg{Subject: s.names.RunSubject(r.ID), Data: data, Header: nats.Header{}}
	doc.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
	if r.Status.Final() {
		doc.Header.Set(jetstream.MsgTTLHeader, strconv.FormatInt(int64(max(s.retention(r.Workflow), time.Second)/time.Second), 10))
	}
	if limit := s.nc.MaxPayload(); limit > 0 && taskmsg.Size(doc)+1024 > limit {
		return fmt.Errorf("%w: the document of run %s would be %d bytes, the server accepts %d; keep step outputs small",
			ErrOutputTooLarge, r.ID, taskmsg.Size(doc), limit)
	}
	resp, err := s.nc.RequestMsgWithContext(ctx, doc)
	var seq uint64
	if err == nil {
		seq, err = s.parseAck(resp)
	}
	if err != nil {
		return s.publishErr(r.ID, err)
	}
	r.Revision = seq
	if verbatim && !r.Status.Final() && checkRun(r.ID, r) == nil {
		docs.remember(r.ID, data, r) // decoding data gives r back
	} else {
		// A final document is read again rarely (Wait, Status), and a
		// slot in the memo is better spent on a run still running.
		docs.forget(r.ID)
	}
	if r.Status.Final() && r.Parent != nil {
		// A child run that ended tells its parent's step (child.go).
		tasks = append(tasks[:len(tasks):len(tasks)], parentTask(s.names, r))
	}
	if len(tasks) > 0 {
		if err := s.publishTasks(ctx, tasks); err != nil {
			return fmt.Errorf("%w: run %s: %w", errTasksNotSent, r.ID, err)
		}
	}
	return nil
}

// publishTasks publishes tasks asynchronously and waits for every
// acknowledgement. A task whose ID was seen within the duplicate window is
// acknowledged as a duplicate and not stored again.
func (s *store) publishTasks(ctx context.Context, tasks []*nats.Msg) error {
	futures := make([]jetstream.PubAckFuture, 0, len(tasks))
	var errs []error
	for _, m := range tasks {
		f, err := s.js.PublishMsgAsync(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Subject, err))
			continue
		}
		futures = append(futures, f)
	}
	// nats.go leaves the futures of a closed connection unresolved until
	// their timeout: look at the connection now and then so that a handler
	// does not outlive its connection by that long.
	var tick *time.Ticker
	if len(futures) > 0 {
		tick = time.NewTicker(closedCheckInterval)
		defer tick.Stop()
	}
	for _, f := range futures {
		if err := s.awaitAck(ctx, f, tick.C); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.Msg().Subject, err))
		}
	}
	return errors.Join(errs...)
}

// awaitAck waits for f's acknowledgement, ctx, or the connection's close
// (seen at a tick).
func (s *store) awaitAck(ctx context.Context, f jetstream.PubAckFuture, tick <-chan time.Time) error {
	for {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			if s.nc.IsClosed() {
				return nats.ErrConnectionClosed
			}
		}
	}
}

// closedCheckInterval is how often publishTasks looks whether the connection
// was closed while it waits for acknowledgements.
const closedCheckInterval = 100 * time.Millisecond

// parseAck reads the acknowledgement of a document write: its sequence in
// the run stream, or the server's error.
func (s *store) parseAck(resp *nats.Msg) (uint64, error) {
	ack, err := asyncpub.ParseAck(resp, s.runs)
	return ack.Seq, err
}

func (s *store) publishErr(id string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return errConflict
		case jetstream.JSErrCodeStreamMessageExceedsMaximum:
			return fmt.Errorf("workflow: run %s: %w: %w", id, ErrOutputTooLarge, err)
		}
		return fmt.Errorf("workflow: write run %s: %w", id, err)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("workflow: write run %s: %w: no stream stores %s (run streams.Ensure with the same prefix): %w",
			id, framework.ErrTopologyMissing, s.names.RunSubject(id), err)
	}
	return fmt.Errorf("workflow: write run %s: %w", id, err)
}

// mutation changes a fresh copy of a run document. It returns the tasks to
// enqueue with the change and whether there is anything to write; it must
// decide from r alone, because it runs again on the newest document after a
// conflicting write.
type mutation func(r *Run) (tasks []*nats.Msg, write bool, err error)

// update applies fn to the newest document of run id and commits the result
// with fn's tasks, re-reading and re-applying fn when another writer got
// there first. r, when not nil, is a document just read, used for the first
// attempt. It returns the document as written (or as read, when fn had
// nothing to write).
func (s *store) update(ctx context.Context, id string, r *Run, fn mutation) (*Run, error) {
	for attempt := 0; ; attempt++ {
		if r == nil {
			// After a conflict, read from the leader: a lagging replica
			// would only lead to another conflict.
			load := s.load
			if attempt > 0 {
				load = s.loadLeader
			}
			var err error
			if r, err = load(ctx, id); err != nil {
				return nil, err
			}
		}
		tasks, write, err := fn(r)
		if err != nil || !write {
			return r, err
		}
		err = s.commit(ctx, r, r.Revision, tasks)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, errConflict) {
			return nil, err
		}
		if attempt >= maxConflictRetries {
			return nil, fmt.Errorf("%w: %s after %d attempts", ErrConflict, id, attempt+1)
		}
		if !backOff(ctx, attempt) {
			return nil, fmt.Errorf("workflow: update run %s: %w", id, ctx.Err())
		}
		r = nil
	}
}

// backOff waits a little after the attempt-th conflicting write, with
// jitter, so that racing writers spread out. It reports false when ctx
// ended first.
func backOff(ctx context.Context, attempt int) bool {
	return retry.Sleep(ctx, time.Duration(rand.Int64N(int64(min(attempt+1, 20))*int64(time.Millisecond))))
}
