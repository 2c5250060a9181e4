package framework_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

type thumbnail struct {
	URL   string `json:"url"`
	Bytes int    `json:"bytes"`
}

// A caller enqueues a task with Awaited and waits for its result; the
// handler reports its progress and stores a result, with state tracking
// off.
func ExampleClient_Wait() {
	srv, cleanup, err := exampleServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cleanup()
	nc, err := testutil.ConnectServer(srv)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		fmt.Println(err)
		return
	}

	w, err := framework.NewWorker(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	w.HandleFunc("images.thumbnail", func(ctx context.Context, t *framework.Task) error {
		if err := framework.ReportProgress(ctx, 1, 2, "resizing"); err != nil {
			return err
		}
		return framework.SetResult(ctx, thumbnail{URL: "https://cdn.example/t/" + t.ID + ".jpg", Bytes: 18204})
	})
	w.HandleFunc("images.broken", func(ctx context.Context, t *framework.Task) error {
		return framework.Permanent(errors.New("not an image"))
	})
	if err := w.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer w.Shutdown(ctx)

	cl, err := framework.NewClient(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	info, err := cl.Enqueue(ctx, "images.thumbnail", nil, framework.WithID("img-42"), framework.Awaited())
	if err != nil {
		fmt.Println(err)
		return
	}
	thumb, err := framework.WaitResult[thumbnail](ctx, cl, info.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(thumb.URL, thumb.Bytes)

	// A task that fails for good ends the wait with its last error.
	info, err = cl.Enqueue(ctx, "images.broken", nil, framework.WithID("img-43"), framework.Awaited())
	if err != nil {
		fmt.Println(err)
		return
	}
	rec, err := cl.Wait(ctx, info.ID)
	fmt.Println(rec.State, errors.Is(err, framework.ErrTaskFailed))
	fmt.Println(err)
	// Output:
	// https://cdn.example/t/img-42.jpg 18204
	// dead true
	// framework: task img-43 failed after 1 attempt(s) and was dead-lettered: permanent: not an image
}
