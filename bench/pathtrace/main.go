// Command pathtrace traces one task's path through jetflow, from its
// arrival in a pull buffer to its acknowledgement, and counts the files it
// crosses and how often it comes back to a file it already left.
//
// Run it with run.sh, which builds this program without optimisations, runs
// it under Delve's tracer (dlv trace, a breakpoint on every function of the
// module's library packages) and analyses the trace:
//
//	bench/pathtrace/run.sh            # from the repository root
//
// The program starts an embedded server and a worker with one no-op task
// type, runs one task to warm the path up, then a second one between two
// markers (traceBegin, traceEnd). The analysis (-analyze) keeps the calls
// between the markers, splits each goroutine's calls where it returns to no
// traced caller, keeps the episodes that touch the task (its direct start
// or its offer to the scheduler, the executor, the acker's write) and lists
// the functions of the module they enter in order, each with its file
// (skipping the wrappers the compiler makes for promoted methods). A return is entering
// a file that the path left before; consecutive calls in one file count once.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func main() {
	analyze := flag.String("analyze", "", "analyse this dlv trace output instead of running the traced program")
	root := flag.String("root", ".", "the repository root, to map functions to files (with -analyze)")
	flag.Parse()
	if *analyze != "" {
		if err := report(os.Stdout, *analyze, *root); err != nil {
			fmt.Fprintln(os.Stderr, "pathtrace:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "pathtrace:", err)
		os.Exit(1)
	}
}

// traceBegin and traceEnd mark the traced task's window in the trace.
//
//go:noinline
func traceBegin() {}

//go:noinline
func traceEnd() {}

// run runs two tasks, the second between the markers.
func run(ctx context.Context) error {
	e, err := testutil.StartEmbedded(ctx, streams.Config{})
	if err != nil {
		return err
	}
	defer e.Close()
	w, err := framework.NewWorker(e.Conn)
	if err != nil {
		return err
	}
	done := make(chan struct{}, 1)
	w.HandleFunc("trace.noop", func(context.Context, *framework.Task) error { done <- struct{}{}; return nil })
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = w.Shutdown(ctx) }()
	c, err := framework.NewClient(e.Conn)
	if err != nil {
		return err
	}
	for i := range 2 {
		// Under the tracer everything is slow: let the start-up's and the
		// first task's work finish before the window opens.
		time.Sleep(2 * time.Second)
		if i == 1 {
			traceBegin()
		}
		if _, err := c.Enqueue(ctx, "trace.noop", map[string]int{"i": i}); err != nil {
			return err
		}
		<-done
		for w.Stats().Succeeded < uint64(i+1) || w.Stats().Running > 0 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // the acker's write
		if i == 1 {
			traceEnd()
		}
	}
	return nil
}
