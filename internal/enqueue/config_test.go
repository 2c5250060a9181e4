package enqueue

import (
	"errors"
	"testing"

	"github.com/jetflow-io/jetflow/streams"
)

func TestApply(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	high := func(c *Config) error { c.Priority = streams.PriorityHigh; return nil }
	low := func(c *Config) error { c.Priority = streams.PriorityLow; return nil }
	cases := []struct {
		name    string
		opts    []option
		want    streams.Priority
		wantErr error
	}{
		{"none", nil, streams.PriorityNormal, nil},
		{"nil options skipped", []option{nil, high, nil}, streams.PriorityHigh, nil},
		{"last one wins", []option{high, low}, streams.PriorityLow, nil},
		{"first error", []option{high, func(*Config) error { return boom }, low}, 0, boom},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Apply(tc.opts)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Apply = %v, want %v", err, tc.wantErr)
			}
			if err == nil && cfg.Priority != tc.want {
				t.Errorf("priority %v, want %v", cfg.Priority, tc.want)
			}
			if err != nil && cfg.Priority != 0 {
				t.Errorf("a failed Apply returned %+v, want the zero Config", cfg)
			}
		})
	}
}

func TestSetHeader(t *testing.T) {
	t.Parallel()
	var c Config
	c.SetHeader("A", "1")
	c.SetHeader("B", "2")
	c.SetHeader("A", "3")
	if len(c.Headers) != 2 || c.Headers["A"] != "3" || c.Headers["B"] != "2" {
		t.Errorf("headers %v, want A=3 B=2", c.Headers)
	}
}

func TestTaskID(t *testing.T) {
	t.Parallel()
	if got := TaskID("abc", 7); got != "abc" {
		t.Errorf("TaskID(abc, 7) = %q", got)
	}
	if got := TaskID("", 7); got != "seq-7" {
		t.Errorf("TaskID(\"\", 7) = %q, want seq-7", got)
	}
}
