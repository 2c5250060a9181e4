package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
)

// OrderedEvent is the payload of the ordered tasks the worker runs with
// -partitions: the task's ordering key and its position in the key.
type OrderedEvent struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// Record is what the worker publishes on the -record subject when an
// ordered task starts ("start") and when its handler returns ("end").
type Record struct {
	Ev      string `json:"ev"`
	Key     string `json:"key"`
	N       int    `json:"n"`
	Attempt int    `json:"attempt"`
	PID     int    `json:"pid"`
	ID      string `json:"id"`
}

// orderedConfig is the ordered mode of the worker.
type orderedConfig struct {
	partitions int
	lanes      int // instead of partitions when set
	record     string
	block      string // "key/n": hold this task's first attempt until killed
	hold       time.Duration
	ackWait    time.Duration
}

// parseBlock splits a -block value "key/n".
func parseBlock(s string) (string, int, error) {
	if s == "" {
		return "", -1, nil
	}
	i := strings.LastIndexByte(s, '/')
	if i <= 0 {
		return "", 0, fmt.Errorf("-block %q: want key/n", s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return "", 0, fmt.Errorf("-block %q: %w", s, err)
	}
	return s[:i], n, nil
}

// handleOrdered registers taskType as an ordered type on w. Each run
// publishes a start record, works for hold (or, for the first attempt of the
// -block task, until the process dies), publishes an end record and returns.
// Records are flushed before the handler goes on, so the server has routed
// a task's end record before the task is acknowledged.
func handleOrdered(w *framework.Worker, nc *nats.Conn, taskType string, cfg orderedConfig) error {
	blockKey, blockN, err := parseBlock(cfg.block)
	if err != nil {
		return err
	}
	pid := os.Getpid()
	publish := func(ev string, task *framework.Task, e OrderedEvent) error {
		b, err := json.Marshal(Record{Ev: ev, Key: e.Key, N: e.N, Attempt: task.Attempt, PID: pid, ID: task.ID})
		if err != nil {
			return err
		}
		if err := nc.Publish(cfg.record, b); err != nil {
			return err
		}
		return nc.Flush()
	}
	framework.Handle(w, taskType, func(ctx context.Context, task *framework.Task, e OrderedEvent) error {
		if err := publish("start", task, e); err != nil {
			return err
		}
		hold := cfg.hold
		if e.Key == blockKey && e.N == blockN && task.Attempt == 1 {
			hold = 24 * time.Hour // the test kills the process meanwhile
		}
		timer := time.NewTimer(hold)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		return publish("end", task, e)
	}, framework.WithAckWait(cfg.ackWait), framework.WithOrdering(framework.Ordering{Partitions: cfg.partitions, Lanes: cfg.lanes}))
	return nil
}
