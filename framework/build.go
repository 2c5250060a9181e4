package framework

import (
	"fmt"
	"maps"
	"time"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// Building a task's message from Enqueue's arguments: options, payload,
// headers, subject (client.go sends it).

// enqueueOptions applies opts to a fresh configuration. Only a call with
// options puts one on the heap (an option is a function taking its
// address).
func enqueueOptions(opts []EnqueueOption) (enqueueConfig, error) {
	if len(opts) == 0 {
		return enqueueConfig{}, nil
	}
	cfg := new(enqueueConfig)
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(cfg); err != nil {
			return enqueueConfig{}, err
		}
	}
	return *cfg, nil
}

// build validates a task and returns its message and TaskInfo.
func (c *Client) build(taskType string, payload any, opts []EnqueueOption, partitions streams.Layout) (*nats.Msg, TaskInfo, error) {
	return c.buildWith(taskType, payload, opts, nil, partitions)
}

// buildWith is build, taking work subjects from subjects (nil: none).
// partitions is the deployment's layout of task partitions (partitions.go).
func (c *Client) buildWith(taskType string, payload any, opts []EnqueueOption, subjects workSubjects, partitions streams.Layout) (*nats.Msg, TaskInfo, error) {
	if err := streams.ValidateTaskType(taskType); err != nil {
		return nil, TaskInfo{}, err
	}
	if err := checkArgsType(taskType, payload); err != nil {
		return nil, TaskInfo{}, err
	}
	cfg, err := enqueueOptions(opts)
	if err != nil {
		return nil, TaskInfo{}, err
	}
	data, enc, err := encode(c.opts.codec, payload)
	if err != nil {
		return nil, TaskInfo{}, fmt.Errorf("%w: task type %s (%T): %w", ErrEncode, taskType, payload, err)
	}
	// The clock is read only for what needs it: a due time or a unique
	// period.
	var now time.Time
	if cfg.delay > 0 || !cfg.at.IsZero() || cfg.unique.period != 0 {
		now = time.Now()
	}
	due := cfg.at
	if cfg.delay > 0 {
		due = now.Add(cfg.delay)
	}
	if due.After(taskmsg.MaxDue) {
		return nil, TaskInfo{}, fmt.Errorf("%w: due time %s is after %s, the last time a schedule can hold",
			ErrInvalidOption, due.UTC().Format(time.RFC3339), taskmsg.MaxDue.Format(time.RFC3339))
	}
	delayed := due.After(now)
	id := cfg.id
	// Without dedup an immediate task's ID is its stream sequence, filled in
	// from the acknowledgement (seqID).
	// (Sequences of task partitions overlap: there, every task has an ID.)
	anonymous := id == "" && c.opts.noDedup && !delayed && partitions.Partitions < 2
	if id == "" && !anonymous {
		id = nuid.Next()
	}
	headers, unique, err := cfg.unique.headers(taskType, data, now, cfg.headers)
	if err != nil {
		return nil, TaskInfo{}, err
	}
	if unique && anonymous {
		return nil, TaskInfo{}, fmt.Errorf("%w: Unique needs a task ID: combine it with WithID when the client has WithDedup(false)", ErrInvalidOption)
	}
	version, err := payloadVersionHeader(&cfg, payload) // versions.go
	if err != nil {
		return nil, TaskInfo{}, err
	}
	// set writes a header on a copy: the option's map stays the caller's
	// (a unique task's headers are a copy already).
	owned := unique
	set := func(k, v string) {
		if !owned {
			headers, owned = maps.Clone(headers), true
		}
		if headers == nil {
			headers = make(map[string]string, 2)
		}
		headers[k] = v
	}
	if version != "" {
		set(HeaderPayloadVersion, version)
	}
	names := c.partitionFor(cfg.orderingKey, taskType, id, partitions) // partitions.go
	target := c.taskSubject(names, cfg.priority, taskType, subjects)
	if cfg.orderingKey != "" {
		if target, err = orderedTarget(names, taskType, &cfg, delayed); err != nil {
			return nil, TaskInfo{}, err
		}
		set(HeaderOrderingKey, cfg.orderingKey)
	}
	spec := taskmsg.Spec{Target: target, ID: id, Anonymous: anonymous,
		Encoding: enc, Headers: headers, Data: data, Due: due, Now: now}
	if delayed {
		// The target is derived here from the validated type and priority,
		// never taken from the caller: a schedule can only fire into the
		// staging subject of a work subject.
		spec.DelaySubject = c.names.DelaySubject(id)
		spec.ScheduleTarget = names.FiredSubject(cfg.priority, taskType)
	}
	msg, size := taskmsg.BuildSized(spec)
	info := TaskInfo{ID: id, Type: taskType, Priority: cfg.priority, Subject: msg.Subject}
	if delayed {
		info.ScheduledFor = due
	}
	if max := c.nc.MaxPayload(); max > 0 {
		if size > max {
			return nil, TaskInfo{}, fmt.Errorf("%w: task type %s is %d bytes with headers, the server accepts at most %d; store large data elsewhere (for example an object store) and enqueue a reference",
				ErrPayloadTooLarge, taskType, size, max)
		}
	}
	return msg, info, nil
}
