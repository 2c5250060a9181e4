package jetflowotel_test

import (
	"context"
	"log"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	jetflowotel "github.com/jetflow-io/jetflow/contrib/otel"
	"github.com/jetflow-io/jetflow/framework"
)

// Trace a client and a worker: the enqueue span's context travels in the
// task headers, and each attempt's span is its child.
func Example() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider() // with your exporter
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := jetflowotel.New(jetflowotel.Options{TracerProvider: tp})

	cl, err := framework.NewClient(nc, tr.ClientOption())
	if err != nil {
		log.Fatal(err)
	}
	w, err := framework.NewWorker(nc)
	if err != nil {
		log.Fatal(err)
	}
	w.HandleFunc("mail.send", func(ctx context.Context, t *framework.Task) error {
		// Spans started from ctx are children of the attempt's span.
		return nil
	})
	tr.Instrument(w) // attempt spans and their outcomes, before w.Start
	_ = cl
	// w.Run(ctx); cl.Enqueue(ctx, "mail.send", payload)
}
