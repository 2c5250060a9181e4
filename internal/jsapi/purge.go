package jsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultTimeout bounds one request of this package when the caller's
// context has no deadline.
const DefaultTimeout = 10 * time.Second

// WithTimeout bounds ctx by DefaultTimeout when it has no deadline.
func WithTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// PurgeSubject purges subject from stream and returns how many messages were
// removed (the jetstream package does not report it).
func PurgeSubject(ctx context.Context, nc *nats.Conn, stream, subject string) (uint64, error) {
	ctx, cancel := WithTimeout(ctx)
	defer cancel()
	body, err := json.Marshal(struct {
		Filter string `json:"filter"`
	}{subject})
	if err != nil {
		return 0, err
	}
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+stream, body)
	if err != nil {
		return 0, err
	}
	var resp struct {
		Success bool                `json:"success"`
		Purged  uint64              `json:"purged"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return 0, fmt.Errorf("purge %s: bad response: %w", subject, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound {
			return 0, fmt.Errorf("%w: %w", jetstream.ErrStreamNotFound, resp.Error)
		}
		return 0, resp.Error
	}
	return resp.Purged, nil
}
