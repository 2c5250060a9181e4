package jetflowprom

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetflow-io/jetflow/inspect"
)

// KeyCollectorOptions configure [NewKeyCollector].
type KeyCollectorOptions struct {
	// Prefix is the jetflow topology prefix. Default "jetflow".
	Prefix string
	// TopKeys bounds the keys with series of their own: the busiest
	// TopKeys keys of each type (inspect.Operator.Keys orders them); the
	// others add up under key="other". Default 20, at most 1,000.
	TopKeys int
	// Timeout bounds the read of one scrape. Default 5 s.
	Timeout time.Duration
	// Logger receives query errors. Default: discard.
	Logger *slog.Logger
	// ConstLabels are added to every series. Default none.
	ConstLabels prometheus.Labels
}

// KeyCollector is a [prometheus.Collector] of flow control per task key
// (inspect.Operator.Keys), read at each scrape, with a bounded number of
// series: the busiest TopKeys keys of each type by name, the rest summed
// under key="other".
//
//   - jetflow_key_running{type,key}: tasks of the key running under a
//     keylimit slot;
//   - jetflow_key_staged{type,key}: tasks of the key staged for their
//     fair share (package fairness);
//   - jetflow_key_rate_last_second{type,key}: permits of the key's rate
//     limit (ratelimit.WithKeyLimit) reserved in the last full second;
//   - jetflow_key_throttled{type,key}: keys over their rate limit;
//   - jetflow_key_debounced{type,key}: keys with a debounced burst under way;
//   - jetflow_keys_up: 1 when the keys were read at this scrape.
//
// It is safe for concurrent use.
type KeyCollector struct {
	op      *inspect.Operator
	top     int
	timeout time.Duration
	log     *slog.Logger

	up, running, staged, rate, throttled, debounced *prometheus.Desc
}

// NewKeyCollector returns a collector of the task keys of the topology on
// nc. Register it with prometheus.Registerer.Register.
func NewKeyCollector(nc *nats.Conn, opts KeyCollectorOptions) (*KeyCollector, error) {
	op, timeout, log, d, err := collectorBase(nc, opts.Prefix, opts.Timeout, opts.Logger, opts.ConstLabels)
	if err != nil {
		return nil, err
	}
	if opts.TopKeys <= 0 {
		opts.TopKeys = 20
	}
	opts.TopKeys = min(opts.TopKeys, 1000)
	labels := []string{"type", "key"}
	return &KeyCollector{
		op: op, top: opts.TopKeys, timeout: timeout, log: log,
		up:        d("jetflow_keys_up", "1 when the task keys were read at this scrape.", nil),
		running:   d("jetflow_key_running", "Tasks of the key running under a keylimit slot; key=\"other\" sums the keys past the busiest.", labels),
		staged:    d("jetflow_key_staged", "Tasks of the key staged for their fair share (package fairness); key=\"other\" sums the keys past the busiest.", labels),
		rate:      d("jetflow_key_rate_last_second", "Permits of the key's rate limit reserved in the last full second.", labels),
		throttled: d("jetflow_key_throttled", "Keys over their rate limit (1 per key; summed under key=\"other\").", labels),
		debounced: d("jetflow_key_debounced", "Keys with a debounced burst under way (1 per key; summed under key=\"other\").", labels),
	}, nil
}

// Describe implements [prometheus.Collector].
func (c *KeyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.running, c.staged, c.rate, c.throttled, c.debounced} {
		ch <- d
	}
}

// keyValues are the series values of one key, or of a type's other keys.
type keyValues struct{ running, staged, rate, throttled, debounced float64 }

func (v *keyValues) add(k inspect.KeyInfo) {
	v.running += float64(k.Running)
	v.staged += float64(k.Staged)
	v.rate += float64(k.RateLastSecond)
	if k.Throttled {
		v.throttled++
	}
	if !k.DebouncedSince.IsZero() {
		v.debounced++
	}
}

// Collect implements [prometheus.Collector]. A failed read yields only
// jetflow_keys_up 0.
func (c *KeyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	keys, err := c.op.Keys(ctx, "")
	if err != nil {
		c.log.Error("jetflow key metrics query failed", "error", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	seen := make(map[string]int)         // keys with series of their own, by type
	other := make(map[string]*keyValues) // the rest, by type
	emit := func(typ, key string, v keyValues) {
		ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, v.running, typ, key)
		ch <- prometheus.MustNewConstMetric(c.staged, prometheus.GaugeValue, v.staged, typ, key)
		ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, v.rate, typ, key)
		ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.GaugeValue, v.throttled, typ, key)
		ch <- prometheus.MustNewConstMetric(c.debounced, prometheus.GaugeValue, v.debounced, typ, key)
	}
	for _, k := range keys { // busiest first
		if seen[k.Type] < c.top && k.Key != "other" {
			seen[k.Type]++
			var v keyValues
			v.add(k)
			emit(k.Type, k.Key, v)
			continue
		}
		if other[k.Type] == nil {
			other[k.Type] = &keyValues{}
		}
		other[k.Type].add(k)
	}
	for typ, v := range other {
		emit(typ, "other", *v)
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
}
