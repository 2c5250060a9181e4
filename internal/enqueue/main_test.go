package enqueue

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/streams"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// errInvalid stands for framework.ErrInvalidOption.
var errInvalid = errors.New("test: invalid option")

// option stands for framework.EnqueueOption.
type option func(*Config) error

type jsonCodec struct{}

func (jsonCodec) Name() string                  { return "json" }
func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// newRouter returns a router on the default names that reads layouts
// with read (nil: no deployment).
func newRouter(read func() (streams.Layout, bool, error)) *Router {
	names := streams.MustNames("")
	r := &Router{names: names, taskStream: names.TaskStream(), log: slog.New(slog.DiscardHandler)}
	r.read = func(ctx context.Context) (streams.Layout, bool, error) {
		if read == nil {
			return streams.Layout{}, false, nil
		}
		return read()
	}
	return r
}

// newBuilder returns a builder on the default names.
func newBuilder() *Builder {
	return &Builder{Names: streams.MustNames(""), Codec: jsonCodec{}, ErrInvalid: errInvalid, Router: newRouter(nil)}
}
