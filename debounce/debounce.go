package debounce

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Options says how enqueues of one key are debounced.
type Options struct {
	// Key names what is debounced: enqueues of the same type and Key run
	// once per burst. Required; a task key as framework.WithKey takes it. The run carries
	// it as its task key (framework.WithKey).
	Key string
	// Window is how long the key must stay quiet before its burst runs:
	// each enqueue pushes the run back to a Window after it. At least
	// [MinWindow].
	Window time.Duration
	// MaxWait bounds that: the run starts no later than MaxWait after the
	// burst's first enqueue, however often the key is enqueued. The check
	// that ends a capped burst is due [Lead] before it (a quarter of
	// MaxWait, when that is less): the time a due check takes to fire and
	// its run to start on a busy server. At least Window, at most
	// [MaxMaxWait]. Default 10 × Window (capped).
	MaxWait time.Duration
	// Collect runs the burst with every payload instead of the last one:
	// the run's payload is a JSON array of the burst's payloads in enqueue
	// order (a []byte payload becomes a base64 string, as encoding/json
	// writes it), so its handler takes a slice, for example
	// framework.Handle[[]Edit]. A burst that reaches [MaxCollected]
	// payloads or [MaxCollectedBytes] runs at once. Every enqueue of a
	// burst must say the same.
	Collect bool
}

// Bounds of a collecting burst ([Options].Collect): one that reaches
// MaxCollected payloads or MaxCollectedBytes runs at once; a single payload
// is at most MaxCollectedBytes. An enqueue that would take a burst past
// twice either bound, while its run is being enqueued, gets [ErrFull].
const (
	MaxCollected      = 1000
	MaxCollectedBytes = 256 << 10
)

// ErrFull is returned by [Enqueue] when a collecting burst holds twice
// [MaxCollected] payloads or [MaxCollectedBytes]: its run is due at once,
// and an enqueue a moment later starts the next burst. Retry it.
var ErrFull = errors.New("debounce: collecting burst full")

// Lead is how long before a burst's maximum wait its capped check is due
// (a quarter of [Options].MaxWait when that is less): a due check takes
// tens to hundreds of milliseconds to fire from the server's schedule, be
// taken and enqueue its run, and the run to start. Aimed at the maximum
// wait itself, the run of a busy key started that much after it.
const Lead = 250 * time.Millisecond

// Bounds of [Options].
const (
	MinWindow  = 10 * time.Millisecond
	MaxMaxWait = 12 * time.Hour
)

// HeaderCheck marks a check (the delayed task [Enqueue] sends a window
// ahead) with the key it checks, in unpadded base64url (a header value
// loses its outer spaces; a key may have them). Its name does not start with "Jetflow-"
// so that it rides framework.WithHeader.
const HeaderCheck = "X-Jetflow-Debounce"

// HeaderCapped marks a check due at its burst's maximum wait, with the
// burst's first time (Unix nanoseconds): it runs the burst if the burst is
// still that one, whatever the clocks of the producer and the worker say.
const HeaderCapped = "X-Jetflow-Debounce-Capped"

// bucketAge is how long the bucket keeps a record not written again: well
// past any burst ([MaxMaxWait]), so that only a record whose check was never
// enqueued expires.
const bucketAge = 2 * MaxMaxWait

// record is a key's burst in the bucket. It comes from the bucket, where
// anyone with write permission may have put anything: check it.
type record struct {
	First    int64  `json:"first"`    // Unix nanoseconds of the burst's first enqueue
	MaxWait  int64  `json:"max_wait"` // nanoseconds
	Last     string `json:"last"`     // ID of the last enqueue's check
	Count    int    `json:"count"`    // enqueues in the burst
	Payload  []byte `json:"payload"`
	Encoding string `json:"encoding,omitempty"` // "" (JSON) or "raw"
	// Collect: Payloads holds every payload of the burst, JSON each.
	Collect  bool              `json:"collect,omitempty"`
	Payloads []json.RawMessage `json:"payloads,omitempty"`
}

// collected is the size of rec's payloads, in bytes.
func (rec *record) collected() int {
	n := 0
	for _, p := range rec.Payloads {
		n += len(p)
	}
	return n
}

// withDefaults validates o and fills MaxWait.
func (o Options) withDefaults() (Options, error) {
	if err := taskmsg.ValidateKey(o.Key); err != nil {
		return o, fmt.Errorf("%w: debounce: %w", framework.ErrInvalidOption, err)
	}
	if o.Window < MinWindow {
		return o, fmt.Errorf("%w: debounce window %v, want at least %v", framework.ErrInvalidOption, o.Window, MinWindow)
	}
	if o.MaxWait == 0 {
		o.MaxWait = min(10*o.Window, MaxMaxWait)
	}
	if o.MaxWait < o.Window || o.MaxWait > MaxMaxWait {
		return o, fmt.Errorf("%w: debounce max wait %v, want %v (the window) to %v", framework.ErrInvalidOption, o.MaxWait, o.Window, MaxMaxWait)
	}
	return o, nil
}

// recordKey returns the bucket key of key's record for taskType:
// "<type>.<key in unpadded base64url>", valid for any valid key.
func recordKey(taskType, key string) string {
	return taskType + "." + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// bucket returns the debounce bucket of names, created when missing.
func bucket(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, names.DebounceBucket())
	if err == nil || !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	cfg := jsapi.TaskStreamBucket(ctx, js, names.TaskStream(), jetstream.KeyValueConfig{
		Bucket:      names.DebounceBucket(),
		Description: "jetflow debounce: the burst of enqueues of each key of a type waiting to run (package debounce)",
		History:     1,
		TTL:         bucketAge,
	})
	if err := jsapi.EnsureBucket(ctx, js, cfg, false); err != nil {
		return nil, fmt.Errorf("debounce: create bucket %s: %w", cfg.Bucket, err)
	}
	return js.KeyValue(ctx, cfg.Bucket)
}

// Enqueue debounces a task of taskType with payload under o: it records
// the enqueue as its key's last and enqueues a check due o.Window later (or
// at the burst's maximum wait). The handler of taskType runs once for the
// burst, with the last payload, on a worker with [Install]. opts apply to
// the check; its priority is the run's. It returns the check's TaskInfo.
// Invalid options and payloads get an error wrapping
// framework.ErrInvalidOption, and nothing is recorded.
func Enqueue(ctx context.Context, c *framework.Client, taskType string, payload any, o Options, opts ...framework.EnqueueOption) (framework.TaskInfo, error) {
	o, err := o.withDefaults()
	if err != nil {
		return framework.TaskInfo{}, err
	}
	if err := streams.ValidateTaskType(taskType); err != nil {
		return framework.TaskInfo{}, fmt.Errorf("%w: %w", framework.ErrInvalidOption, err)
	}
	rec := record{MaxWait: int64(o.MaxWait), Last: "dbc-" + nuid.Next(), Collect: o.Collect}
	switch p := payload.(type) {
	case []byte:
		rec.Payload, rec.Encoding = p, "raw"
		if o.Collect {
			rec.Payload, rec.Encoding = nil, ""
			if rec.Payload, err = json.Marshal(p); err != nil {
				return framework.TaskInfo{}, fmt.Errorf("%w: debounce: payload: %w", framework.ErrInvalidOption, err)
			}
		}
	default:
		if c.Codec().Name() != "json" {
			return framework.TaskInfo{}, fmt.Errorf("%w: debounce: payloads are JSON or []byte, the client's codec is %s", framework.ErrInvalidOption, c.Codec().Name())
		}
		if rec.Payload, err = json.Marshal(payload); err != nil {
			return framework.TaskInfo{}, fmt.Errorf("%w: debounce: payload: %w", framework.ErrInvalidOption, err)
		}
	}
	if o.Collect {
		if len(rec.Payload) > MaxCollectedBytes {
			return framework.TaskInfo{}, fmt.Errorf("%w: debounce: a collected payload of %d bytes, want at most %d", framework.ErrInvalidOption, len(rec.Payload), MaxCollectedBytes)
		}
		rec.Payloads, rec.Payload = []json.RawMessage{rec.Payload}, nil
	}
	kv, err := bucket(ctx, c.JetStream(), c.Names())
	if err != nil {
		return framework.TaskInfo{}, err
	}
	key := recordKey(taskType, o.Key)
	due, first, capped, err := put(ctx, kv, key, rec, o.Window)
	if err != nil {
		return framework.TaskInfo{}, err
	}
	opts = append(opts, framework.WithID(rec.Last), framework.At(due), framework.WithHeader(HeaderCheck, base64.RawURLEncoding.EncodeToString([]byte(o.Key))))
	if capped {
		opts = append(opts, framework.WithHeader(HeaderCapped, strconv.FormatInt(first, 10)))
	}
	return c.Enqueue(ctx, taskType, nil, opts...)
}

// checkDue returns when the check of an enqueue at now is due: a window
// after it, or [Lead] before the maximum wait of the burst that began at
// first (Unix nanoseconds) when that is sooner (capped), or now when the
// burst is full.
func checkDue(now time.Time, first int64, maxWait, window time.Duration, full bool) (time.Time, bool) {
	limit := time.Unix(0, first).Add(maxWait - min(Lead, maxWait/4))
	if full {
		limit = now
	}
	if due := now.Add(window); due.Before(limit) {
		return due, false
	}
	return limit, true
}

// put writes rec as key's last enqueue, keeping the burst's first time
// when a burst is under way, and returns when its check is due: window
// after now, or at the burst's maximum wait if that is sooner (capped),
// with the burst's first time.
func put(ctx context.Context, kv jetstream.KeyValue, key string, rec record, window time.Duration) (due time.Time, first int64, capped bool, err error) {
	for range 64 {
		now := time.Now()
		rec.First, rec.Count = now.UnixNano(), 1
		var rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return time.Time{}, 0, false, fmt.Errorf("debounce: read %s: %w", key, err)
		default:
			rev = e.Revision()
			var have record
			rec.Count = 1
			if json.Unmarshal(e.Value(), &have) == nil && have.First > 0 && have.First <= rec.First {
				rec.First, rec.Count = have.First, have.Count+1
				if err := collect(&rec, &have, key); err != nil {
					return time.Time{}, 0, false, err
				}
			}
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return time.Time{}, 0, false, err
		}
		if rev == 0 {
			_, err = kv.Create(ctx, key, b)
		} else {
			_, err = kv.Update(ctx, key, b, rev)
		}
		if err == nil {
			full := rec.Collect && (len(rec.Payloads) >= MaxCollected || rec.collected() >= MaxCollectedBytes)
			due, capped := checkDue(now, rec.First, time.Duration(rec.MaxWait), window, full)
			return due, rec.First, capped, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !natserr.WrongLastSequence(err) {
			return time.Time{}, 0, false, fmt.Errorf("debounce: write %s: %w", key, err)
		}
		if ctx.Err() != nil {
			return time.Time{}, 0, false, ctx.Err()
		}
	}
	return time.Time{}, 0, false, fmt.Errorf("debounce: write %s: too many concurrent enqueues of the key", key)
}

// collect adds the payloads of have, the burst under way, ahead of rec's
// own when the burst collects. Every enqueue of a burst must collect, or
// none.
func collect(rec, have *record, key string) error {
	if have.Collect != rec.Collect {
		return fmt.Errorf("%w: debounce: the burst of %s under way has Collect %v", framework.ErrInvalidOption, key, have.Collect)
	}
	if !rec.Collect {
		return nil
	}
	if len(have.Payloads) >= 2*MaxCollected || have.collected() >= 2*MaxCollectedBytes {
		return fmt.Errorf("%w: %s holds %d payloads", ErrFull, key, len(have.Payloads))
	}
	rec.Payloads = append(slices.Clone(have.Payloads), rec.Payloads...)
	return nil
}
