package delays

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The movers' consumer belongs to the deployment: streams.Ensure creates
// it and sets it right. A worker only looks it up (CONSUMER.INFO) and uses
// it as it is, so that its credentials need no right to create or change
// it: a worker that could change it could stop every delayed task (a
// filter that matches nothing). Only when it does not exist does the
// mover create it, for deployments that let workers do so.

// Drift is one setting in which the movers' existing consumer differs
// from the wanted one.
type Drift struct {
	Field, Want, Have string
}

// String describes d on one line.
func (d Drift) String() string { return d.Field + " is " + d.Have + ", want " + d.Want }

// ConsumerDrift returns the settings of have that keep the movers from
// moving every delayed task as want would: which messages it delivers and
// how, how many at once, whether it is paused or removed when idle. Other
// settings (a description, metadata) are not compared.
func ConsumerDrift(want, have jetstream.ConsumerConfig) []Drift {
	var out []Drift
	diff := func(field string, w, h any) {
		if ws, hs := fmt.Sprint(w), fmt.Sprint(h); ws != hs {
			out = append(out, Drift{Field: field, Want: ws, Have: hs})
		}
	}
	diff("AckPolicy", want.AckPolicy, have.AckPolicy)
	diff("DeliverPolicy", want.DeliverPolicy, have.DeliverPolicy)
	diff("AckWait", want.AckWait, have.AckWait)
	diff("MaxDeliver", want.MaxDeliver, have.MaxDeliver)
	diff("MaxAckPending", want.MaxAckPending, have.MaxAckPending)
	diff("FilterSubject", want.FilterSubject, have.FilterSubject)
	diff("FilterSubjects", strings.Join(want.FilterSubjects, ","), strings.Join(have.FilterSubjects, ","))
	diff("InactiveThreshold", want.InactiveThreshold, have.InactiveThreshold)
	diff("MaxRequestBatch", want.MaxRequestBatch, have.MaxRequestBatch)
	paused := func(c jetstream.ConsumerConfig) string {
		if c.PauseUntil == nil || !c.PauseUntil.After(time.Now()) {
			return "none"
		}
		return c.PauseUntil.UTC().Format(time.RFC3339)
	}
	diff("PauseUntil", paused(want), paused(have))
	return out
}

// consumer looks up the movers' consumer and uses it as it is, with a
// warning naming what differs from m.topo.Consumer; it creates it only
// when it does not exist.
func (m *Mover) consumer(ctx context.Context) error {
	want := m.topo.Consumer
	c, err := m.js.Consumer(ctx, m.topo.DelayStream, want.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		_, err := m.js.CreateConsumer(ctx, m.topo.DelayStream, want)
		if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) { // another mover's, meanwhile
			return fmt.Errorf("framework: delay mover: create consumer %s of %s: %w", want.Durable, m.topo.DelayStream, err)
		}
		return nil
	case errors.Is(err, jetstream.ErrNotPullConsumer):
		return fmt.Errorf("framework: delay mover: consumer %s of %s is a push consumer, movers pull (run streams.Ensure to see it reported): %w",
			want.Durable, m.topo.DelayStream, err)
	case err != nil:
		return fmt.Errorf("framework: delay mover: look up consumer %s of %s: %w", want.Durable, m.topo.DelayStream, err)
	}
	if drift := ConsumerDrift(want, c.CachedInfo().Config); len(drift) > 0 {
		parts := make([]string, len(drift))
		for i, d := range drift {
			parts[i] = d.String()
		}
		m.log.Warn("jetflow delay mover: its consumer differs from what streams.Ensure creates; using it as it is (run streams.Ensure to set it right)",
			slog.String("stream", m.topo.DelayStream), slog.String("consumer", want.Durable),
			slog.String("drift", strings.Join(parts, "; ")))
	}
	return nil
}
