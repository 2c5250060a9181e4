package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// MaxList bounds the records [Rules.List] returns; the others are counted.
const MaxList = 10000

// ErrNoRegistry is returned by [Rules.List] when the registry bucket does
// not exist: no worker of a version with the registry has started.
var ErrNoRegistry = errors.New("fleet: no worker registry bucket")

// Listing is the live records of the registry.
type Listing struct {
	// Records are sorted by host, then start time, then ID.
	Records []Record
	// Invalid counts the records that break the rules (written by another
	// tool) and were skipped; Omitted those beyond MaxList.
	Invalid, Omitted int
}

// List reads every live record of bucket in one watch. A watch that misses
// a key the stream holds (a record rewritten while the watch was being
// delivered can be passed over: its old message is gone and the watch
// ended before the new one) is read again, up to three times; the stream's
// subject index is the reference.
func (r Rules) List(ctx context.Context, js jetstream.JetStream, bucket string) (*Listing, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w %s", ErrNoRegistry, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("fleet: bucket %s: %w", bucket, err)
	}
	var out *Listing
	for range 3 {
		var seen map[string]bool
		out, seen, err = r.watch(ctx, kv, bucket)
		if err != nil {
			return nil, err
		}
		missed, err := missing(ctx, js, bucket, seen)
		if err != nil || !missed {
			break // without the index (no permission), the watch is the answer
		}
	}
	slices.SortFunc(out.Records, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), a.Started.Compare(b.Started), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// watch reads the bucket once; seen holds every key the watch delivered,
// deleted ones too.
func (r Rules) watch(ctx context.Context, kv jetstream.KeyValue, bucket string) (*Listing, map[string]bool, error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: list %s: %w", bucket, err)
	}
	defer func() { _ = w.Stop() }()
	out, seen := &Listing{}, make(map[string]bool)
	for {
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("fleet: list %s: %w", bucket, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil, fmt.Errorf("fleet: list %s: watch ended", bucket)
			}
			if e == nil { // every current record was delivered
				return out, seen, nil
			}
			seen[e.Key()] = true
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			rec, err := r.Decode(e.Key(), e.Value())
			switch {
			case err != nil:
				out.Invalid++
			case len(out.Records) >= MaxList:
				out.Omitted++
			default:
				out.Records = append(out.Records, *rec)
			}
		}
	}
}

// missing reports whether the bucket's stream holds a key that seen lacks.
func missing(ctx context.Context, js jetstream.JetStream, bucket string, seen map[string]bool) (bool, error) {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return false, err
	}
	prefix := "$KV." + bucket + "."
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return false, err
	}
	for subj := range info.State.Subjects {
		if !seen[strings.TrimPrefix(subj, prefix)] {
			return true, nil
		}
	}
	return false, nil
}
