package enqueue

import (
	"errors"
	"time"

	"github.com/jetflow-io/jetflow/internal/unique"
	"github.com/jetflow-io/jetflow/streams"
)

// Errors of a build; framework re-exports them (framework.ErrEncode,
// framework.ErrOrdering).
var (
	// ErrEncode reports a payload the codec could not encode.
	ErrEncode = errors.New("framework: cannot encode payload")
	// ErrOrdering reports an ordered enqueue that cannot keep its promise:
	// an ordered task with a priority or a delay.
	ErrOrdering = errors.New("framework: ordered task")
)

// Config is one enqueue's options. The zero value is an immediate task of
// normal priority with a generated ID.
type Config struct {
	// Priority is the task's priority.
	Priority streams.Priority
	// ID is the caller's task ID, "" for a generated one.
	ID string
	// Delay and At make a delayed task: due Delay from now, or at At.
	Delay time.Duration
	At    time.Time
	// Headers are the caller's headers; the build never writes to the map.
	Headers map[string]string
	// Unique makes the task unique for Unique.Period (0: not unique).
	Unique unique.Spec
	// OrderingKey is the key of an ordered task, "" for none.
	OrderingKey string
	// Version is the payload version; 0 means the payload's own, if it
	// names one.
	Version int
}

// SetHeader sets the caller's header k to v, making the map when needed.
func (c *Config) SetHeader(k, v string) {
	if c.Headers == nil {
		c.Headers = make(map[string]string, 2)
	}
	c.Headers[k] = v
}

// Apply applies opts, skipping nil ones, to a fresh Config and returns it,
// or the first option's error. Only a call with options puts a Config on
// the heap (an option is a function taking its address).
func Apply[O ~func(*Config) error](opts []O) (Config, error) {
	cfg, err := Options(opts)
	if err != nil {
		return Config{}, err
	}
	return *cfg, nil
}

// Options is [Apply] returning a pointer, for a caller that keeps its
// frame small (framework's Client.Enqueue, see [Builder.Build]): without
// options, a pointer to a shared zero Config that no one may modify.
func Options[O ~func(*Config) error](opts []O) (*Config, error) {
	if len(opts) == 0 {
		return &noOptions, nil
	}
	cfg := new(Config)
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(cfg); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// noOptions is the Config of an enqueue without options; read only.
var noOptions Config
