package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

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

// List reads every live record of bucket in one watch.
func (r Rules) List(ctx context.Context, js jetstream.JetStream, bucket string) (*Listing, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w %s", ErrNoRegistry, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("fleet: bucket %s: %w", bucket, err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("fleet: list %s: %w", bucket, err)
	}
	defer func() { _ = w.Stop() }()
	out := &Listing{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("fleet: list %s: %w", bucket, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("fleet: list %s: watch ended", bucket)
			}
			if e == nil { // every current record was delivered
				slices.SortFunc(out.Records, func(a, b Record) int {
					return cmp.Or(cmp.Compare(a.Host, b.Host), a.Started.Compare(b.Started), cmp.Compare(a.ID, b.ID))
				})
				return out, nil
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
