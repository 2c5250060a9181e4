package jetflowprom_test

import (
	"log"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	jetflowprom "github.com/jetflow-io/jetflow/contrib/prometheus"
	"github.com/jetflow-io/jetflow/framework"
)

// Worker counters and queue gauges on one registry, served at /metrics.
func Example() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := jetflowprom.New(reg, jetflowprom.Options{})
	if err != nil {
		log.Fatal(err)
	}
	w, err := framework.NewWorker(nc)
	if err != nil {
		log.Fatal(err)
	}
	// w.HandleFunc(...)
	m.Instrument(w)
	qc, err := jetflowprom.NewQueueCollector(nc, jetflowprom.QueueCollectorOptions{})
	if err != nil {
		log.Fatal(err)
	}
	reg.MustRegister(qc)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	go func() { log.Fatal(http.ListenAndServe("127.0.0.1:9090", nil)) }()
	// w.Run(ctx)
}
