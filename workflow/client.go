package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/retry"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// MaxRunIDLen is the longest run ID, in bytes.
const MaxRunIDLen = 64

// Client starts, cancels and inspects workflow runs. It is safe for
// concurrent use.
type Client struct {
	store *store
	names streams.Names
	defs  map[string]*Definition
}

// NewClient returns a client publishing through fc (its connection and
// prefix) that can start the workflows defs. [Client.Status] and
// [Client.Cancel] work for runs of any workflow. It returns a
// *[DefinitionError] when a definition is invalid, and an error wrapping
// [ErrInvalidOption] for a nil client or two definitions with one name.
func NewClient(fc *framework.Client, defs ...*Definition) (*Client, error) {
	if fc == nil {
		return nil, fmt.Errorf("%w: nil framework client", ErrInvalidOption)
	}
	m, err := index(defs)
	if err != nil {
		return nil, err
	}
	return &Client{store: newStore(fc.JetStream(), fc.Names(), m), names: fc.Names(), defs: m}, nil
}

func index(defs []*Definition) (map[string]*Definition, error) {
	m := make(map[string]*Definition, len(defs))
	for _, d := range defs {
		if d == nil {
			return nil, fmt.Errorf("%w: nil definition", ErrInvalidOption)
		}
		if err := d.freeze(); err != nil {
			return nil, err
		}
		if _, dup := m[d.name]; dup {
			return nil, fmt.Errorf("%w: two definitions named %q", ErrInvalidOption, d.name)
		}
		m[d.name] = d
	}
	return m, indexChildren(m, defs)
}

// StartOption configures one [Client.Start].
type StartOption func(*startConfig) error

type startConfig struct {
	id string
}

// WithRunID sets the run's ID instead of a generated one, which makes Start
// idempotent: starting an ID that exists returns [ErrRunExists] and changes
// nothing. IDs are 1 to [MaxRunIDLen] bytes of A-Z a-z 0-9 _ - =, not
// starting with "cron-": a step's task ID starts with its run's, and workers
// refuse cron tick IDs on tasks no schedule fired.
func WithRunID(id string) StartOption {
	return func(c *startConfig) error {
		if err := validateRunID(id); err != nil {
			return err
		}
		if taskmsg.ReservedID(id) {
			return fmt.Errorf("%w: run ID %q starts with %q, reserved for the ticks of repeating schedules", ErrInvalidOption, id, taskmsg.CronIDPrefix)
		}
		c.id = id
		return nil
	}
}

func validateRunID(id string) error {
	if err := streams.ValidateID(id); err != nil || len(id) > MaxRunIDLen || strings.Contains(id, ":") {
		return fmt.Errorf("%w: run ID %q: want 1 to %d bytes of A-Z a-z 0-9 _ - =", ErrInvalidOption, id, MaxRunIDLen)
	}
	return nil
}

// Start starts a run of the workflow name with input and returns its ID. The
// input is encoded as JSON (a json.RawMessage is used as is) and must decode
// into the input type of every step. The run's document is stored first and
// then the tasks of its first steps; when Start fails after the document was
// stored it says so, and starting the run again with the same [WithRunID]
// sends the missing tasks.
//
// Errors: [ErrUnknownWorkflow], [ErrInvalidInput], [ErrInvalidOption],
// [ErrRunExists], [framework.ErrTopologyMissing], or a publish error. When ctx
// ends while waiting for the server's acknowledgement the run may have
// started: retry with the same [WithRunID] to be sure.
func (c *Client) Start(ctx context.Context, name string, input any, opts ...StartOption) (string, error) {
	d, ok := c.defs[name]
	if !ok {
		return "", fmt.Errorf("%w: %q (known: %s)", ErrUnknownWorkflow, name, strings.Join(c.known(), ", "))
	}
	var cfg startConfig
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return "", err
		}
	}
	if cfg.id == "" {
		cfg.id = nuid.Next()
	}
	in, err := encodeInput(input)
	if err != nil {
		return "", fmt.Errorf("%w: workflow %s: %w", ErrInvalidInput, name, err)
	}
	for _, sd := range d.order {
		if err := sd.checkInput(in); err != nil {
			return "", fmt.Errorf("%w: workflow %s: step %s takes %v: %w", ErrInvalidInput, name, sd.name, sd.inType, err)
		}
	}
	r, roots := newRun(d, cfg.id, in, time.Now().UTC())
	tasks := make([]*nats.Msg, len(roots))
	for i, s := range roots {
		tasks[i] = stepTask(c.names, d, r.ID, s)
	}
	err = c.store.commit(ctx, r, 0, tasks)
	switch {
	case err == nil:
		return r.ID, nil
	case errors.Is(err, errConflict):
		if rerr := c.resendRoots(ctx, d, cfg.id, in); rerr != nil {
			return cfg.id, fmt.Errorf("%w: %s (resending its first tasks: %w)", ErrRunExists, cfg.id, rerr)
		}
		return cfg.id, fmt.Errorf("%w: %s", ErrRunExists, cfg.id)
	case errors.Is(err, errTasksNotSent):
		return cfg.id, fmt.Errorf("workflow: start %s: run %s was stored but not all of its first tasks were sent; Start it again with WithRunID(%q) to send them: %w",
			name, cfg.id, cfg.id, err)
	}
	return "", fmt.Errorf("workflow: start %s: %w", name, err)
}

// resendRoots re-publishes the first tasks of an existing run with the same
// workflow and input whose roots have not started, in case an earlier Start
// stored the run but not its tasks (see store.commit).
func (c *Client) resendRoots(ctx context.Context, d *Definition, id string, in json.RawMessage) error {
	r, err := c.store.load(ctx, id)
	if err != nil {
		return err
	}
	if r.Workflow != d.name || r.Status != RunRunning || !bytes.Equal(r.Input, in) || checkDefinition(d, r) != nil {
		return nil
	}
	return c.store.publishTasks(ctx, queuedTasks(c.names, d, r, "", true))
}

func encodeInput(input any) (json.RawMessage, error) {
	if raw, ok := input.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return nil, errors.New("json.RawMessage input is not valid JSON")
		}
		return raw, nil
	}
	return json.Marshal(input)
}

func (c *Client) known() []string {
	names := make([]string, 0, len(c.defs))
	for n := range c.defs {
		names = append(names, n)
	}
	return names
}

// Status returns the current document of run id, or an error wrapping
// [ErrRunNotFound]. The progress of a step of [ForEach] that fans out
// ([StepStatus.ItemsDone], ItemsFailed) is read from its fan-out state,
// one more round trip per such step.
func (c *Client) Status(ctx context.Context, id string) (*Run, error) {
	if err := validateRunID(id); err != nil {
		return nil, err
	}
	r, err := c.store.load(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := c.store.progress(ctx, r); err != nil {
		return nil, fmt.Errorf("workflow: read the fan-out progress of run %s: %w", id, err)
	}
	return r, nil
}

// waitPoll spaces the polls of [Client.Wait].
var waitPoll = retry.Policy{Min: 5 * time.Millisecond, Max: 250 * time.Millisecond}

// Wait polls run id until its status is final (completed, failed or
// cancelled) and returns its document, or returns ctx's error.
func (c *Client) Wait(ctx context.Context, id string) (*Run, error) {
	poll := waitPoll.New()
	for {
		r, err := c.Status(ctx, id)
		if err != nil {
			return nil, err
		}
		if r.Status.Final() {
			return r, nil
		}
		if !retry.Sleep(ctx, poll.NextBackOff()) {
			return r, fmt.Errorf("workflow: wait for run %s (status %s): %w", id, r.Status, ctx.Err())
		}
	}
}

// CancelOption configures one [Client.Cancel].
type CancelOption func(*cancelConfig)

type cancelConfig struct {
	compensate bool
	reason     string
}

// WithCompensation makes the cancellation undo the run's completed steps with
// their compensations (in reverse completion order) before the run becomes
// cancelled. Default: completed steps are left as they are.
func WithCompensation() CancelOption {
	return func(c *cancelConfig) { c.compensate = true }
}

// WithReason records why the run was cancelled in its Error field, at most
// 1,024 bytes (Cancel refuses a longer one with [ErrInvalidOption]).
// Default "cancelled".
func WithReason(reason string) CancelOption {
	return func(c *cancelConfig) { c.reason = reason }
}

// Cancel stops run id: no further step is enqueued, steps already enqueued
// are skipped when they come up, sleeping and waiting steps ([Sleep],
// [WaitEvent]) are skipped at once (and no longer listed as waiting for
// their event), the child runs of [Child] steps are cancelled (without
// compensation), with their own children, and running steps notice it through
// [Check] or, at the latest, when they finish (their output is recorded, and
// nothing follows). It returns an error wrapping [ErrRunEnded] when the run
// is no longer running (after cancelling any child run of it still
// running: a cancellation that failed midway is finished by calling Cancel
// again), and [ErrRunNotFound] when there is no such run.
//
// With [WithCompensation], calling Cancel again on a run it already put in
// compensation re-sends the compensation task in progress and returns nil:
// retry it that way when it failed after the run was marked (the document
// and the task are two writes). A run whose document does not match the
// workflow's definition (its steps or compensations differ) is not
// cancelled with compensation: Cancel returns an error and changes nothing.
func (c *Client) Cancel(ctx context.Context, id string, opts ...CancelOption) error {
	if err := validateRunID(id); err != nil {
		return err
	}
	cfg := cancelConfig{reason: "cancelled"}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if len(cfg.reason) > maxErrorBytes {
		return fmt.Errorf("%w: cancel reason of %d bytes, the limit is %d", ErrInvalidOption, len(cfg.reason), maxErrorBytes)
	}
	var resend bool
	r, err := c.store.update(ctx, id, nil, func(r *Run) ([]*nats.Msg, bool, error) {
		if r.Status == RunCompensating && r.CompensateOnCancel && cfg.compensate && c.defs[r.Workflow] != nil {
			// Cancelled with compensation before: make sure the
			// compensation in progress has its task (see resendRoots).
			if err := checkDefinition(c.defs[r.Workflow], r); err != nil {
				return nil, false, err
			}
			resend = true
			return nil, false, nil
		}
		if r.Status != RunRunning {
			return nil, false, fmt.Errorf("%w: run %s is %s", ErrRunEnded, id, r.Status)
		}
		d := c.defs[r.Workflow]
		if cfg.compensate && d == nil {
			return nil, false, fmt.Errorf("%w: %q: cancelling with compensation needs the definition", ErrUnknownWorkflow, r.Workflow)
		}
		if cfg.compensate {
			// The document chooses the compensation tasks to send.
			if err := checkDefinition(d, r); err != nil {
				return nil, false, err
			}
		}
		comp := r.cancel(cfg.reason, cfg.compensate, time.Now().UTC())
		if comp == "" {
			return nil, true, nil
		}
		return []*nats.Msg{compensationTask(c.names, d, id, comp)}, true, nil
	})
	if err == nil && resend {
		err = c.store.publishTasks(ctx, queuedTasks(c.names, c.defs[r.Workflow], r, "", false))
	}
	if errors.Is(err, ErrRunEnded) {
		// Its children may have outlived a cancellation interrupted
		// midway: finish it.
		if cur, lerr := c.store.load(ctx, id); lerr == nil && cur.hasChildren() {
			if cerr := c.store.cancelChildren(ctx, cur); cerr != nil {
				return errors.Join(err, cerr)
			}
		}
		return err
	}
	if err == nil && r.hasChildren() {
		err = c.store.cancelChildren(ctx, r)
	}
	if err == nil {
		// Steps that waited for an event are skipped now: remove their
		// wait entries, best effort (an entry left behind expires after
		// its deadline, or is removed when an event for it comes).
		for _, st := range r.Steps {
			if st.State == StepSkipped && st.EventKey != "" {
				_ = c.store.removeWait(ctx, st.EventKey, id)
			}
		}
	}
	return err
}

// stepTask builds the task message of a step; its ID is "<run>:<step>", so
// it is enqueued once even if a commit is retried.
func stepTask(n streams.Names, d *Definition, runID, step string) *nats.Msg {
	return taskMsg(n, d.priority, StepTaskType(d.name, step), runID, runID+":"+step)
}

// compensationTask builds the task message of a step's compensation; its ID
// is "<run>:<step>:undo".
func compensationTask(n streams.Names, d *Definition, runID, step string) *nats.Msg {
	return taskMsg(n, d.priority, CompensationTaskType(d.name, step), runID, runID+":"+step+":undo")
}

func taskMsg(n streams.Names, p framework.Priority, taskType, runID, taskID string) *nats.Msg {
	h := nats.Header{}
	h.Set(jetstream.MsgIDHeader, taskID)
	h.Set(HeaderRun, runID)
	return &nats.Msg{Subject: n.TaskSubject(p, taskType), Header: h}
}
