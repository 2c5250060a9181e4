package debounce

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// pluginName names the plugin on the worker.
const pluginName = "debounce"

// plugin is a worker's debounce: the bucket and the client that enqueues
// runs, set at Start.
type plugin struct {
	kv jetstream.KeyValue
	cl *framework.Client
}

// Install makes w take the checks of debounced enqueues ([Enqueue]) of
// every type it handles before their handlers: a check that ends a burst
// enqueues the burst's run, and every check is acknowledged without
// running the handler. Call it before Start; Start creates the debounce
// bucket. A worker without Install would run checks as tasks (with a nil
// payload): install it on every worker of a type that is debounced. It
// panics when called twice on one worker or after Start.
func Install(w *framework.Worker) error {
	x := &plugin{}
	w.Use(framework.Plugin{
		Name:  pluginName,
		Value: x,
		Wrap: func(_ *framework.Worker, _ string, next framework.Handler) framework.Handler {
			return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
				if t.Header(HeaderCheck) == "" {
					return next.Handle(ctx, t)
				}
				return x.check(ctx, t)
			})
		},
		Prepare: func(ctx context.Context, w *framework.Worker) error {
			kv, err := bucket(ctx, w.JetStream(), w.Names())
			if err != nil {
				return err
			}
			cl, err := framework.NewClient(w.Conn(), framework.WithPrefix(w.Names().Prefix()),
				framework.WithStateTracking(false), framework.WithLogger(w.Logger()))
			if err != nil {
				return err
			}
			x.kv, x.cl = kv, cl
			return nil
		},
	})
	return nil
}

// check takes the check t: it runs the burst when t is its last enqueue's
// check, or a check at the maximum wait of the burst under way, and
// otherwise ends there. An error (the bucket or the task stream did not
// answer) retries the check; a check whose headers or record cannot be
// read fails for good, dead-lettered as corrupt.
func (x *plugin) check(ctx context.Context, t *framework.Task) error {
	raw, err := base64.RawURLEncoding.DecodeString(t.Header(HeaderCheck))
	if err == nil {
		err = taskmsg.ValidateKey(string(raw))
	}
	if err != nil {
		return framework.Permanent(fmt.Errorf("%w: header %s: %w", framework.ErrCorruptTask, HeaderCheck, err))
	}
	key := recordKey(t.Type, string(raw))
	e, err := x.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil // the burst ran
	}
	if err != nil {
		return fmt.Errorf("debounce: read %s: %w", key, err)
	}
	var rec record
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.Last == "" || (rec.Encoding != "" && rec.Encoding != "raw") {
		return framework.Permanent(fmt.Errorf("%w: debounce record %s cannot be read", framework.ErrCorruptTask, key))
	}
	capped := t.Header(HeaderCapped)
	if rec.Last != t.ID && (capped == "" || capped != strconv.FormatInt(rec.First, 10)) {
		return nil // a later check of the burst runs it
	}
	var payload any = json.RawMessage(rec.Payload)
	if rec.Encoding == "raw" {
		payload = rec.Payload
	}
	if rec.Collect {
		all, err := json.Marshal(rec.Payloads)
		if err != nil {
			return framework.Permanent(fmt.Errorf("%w: debounce record %s: payloads: %w", framework.ErrCorruptTask, key, err))
		}
		payload = json.RawMessage(all)
	}
	if _, err := x.cl.Enqueue(ctx, t.Type, payload, framework.WithID("db-"+rec.Last), framework.WithPriority(t.Priority),
		framework.WithKey(string(raw))); err != nil {
		return fmt.Errorf("debounce: enqueue the run of %s: %w", key, err)
	}
	// A newer enqueue since the read keeps its record: its check runs it
	// (collecting: with the payloads that were not in this run).
	if err := x.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil && rec.Collect {
		return x.trim(ctx, key, rec.First, len(rec.Payloads))
	}
	return nil
}

// trim removes the first n payloads, which ran, from the collecting burst
// of key that began at first, when newer enqueues joined it meanwhile.
func (x *plugin) trim(ctx context.Context, key string, first int64, n int) error {
	for range 64 {
		e, err := x.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("debounce: read %s: %w", key, err)
		}
		var rec record
		if json.Unmarshal(e.Value(), &rec) != nil || rec.First != first || len(rec.Payloads) < n {
			return nil // another burst, or trimmed already
		}
		if len(rec.Payloads) == n {
			err = x.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
		} else {
			rec.Payloads = rec.Payloads[n:]
			b, merr := json.Marshal(rec)
			if merr != nil {
				return merr
			}
			_, err = x.kv.Update(ctx, key, b, e.Revision())
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("debounce: trim %s: too many concurrent enqueues of the key", key)
}
