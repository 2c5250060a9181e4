package topology

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/streams"
)

// MigrateRunDocuments moves the workflow run documents that a task stream of
// the previous layout still holds on "<prefix>.wf.<run>" into the run stream
// (streams.Names.RunStream, decision 023), after streams.Ensure took those subjects away
// from the task stream. Stop workflow workers and producers first: a step
// running meanwhile finds no document and retries. For each run it stores
// the newest revision in the run stream (a final one keeps its message TTL,
// counted again from now) unless the run stream already has a document of
// that run, and then deletes every revision from the task stream. It returns
// how many documents it stored. It is safe to run again after a crash; on a
// task stream without run documents it does nothing. It holds the newest
// revision of every run in memory while it runs.
func MigrateRunDocuments(ctx context.Context, js jetstream.JetStream, c streams.Config) (int, error) {
	// StreamConfigs refuses c as Ensure does.
	if _, err := streams.StreamConfigs(c); err != nil {
		return 0, err
	}
	n, err := streams.NewNames(c.Prefix)
	if err != nil {
		return 0, err
	}
	tasks, err := js.Stream(ctx, n.TaskStream())
	if err != nil {
		return 0, fmt.Errorf("streams: migrate runs: look up %s: %w", n.TaskStream(), err)
	}
	if _, err := js.Stream(ctx, n.RunStream()); err != nil {
		return 0, fmt.Errorf("streams: migrate runs: look up %s (run Ensure first): %w", n.RunStream(), err)
	}
	if slices.Contains(tasks.CachedInfo().Config.Subjects, n.RunSubject(">")) {
		return 0, fmt.Errorf("streams: migrate runs: %s still holds %s: run Ensure first", n.TaskStream(), n.RunSubject(">"))
	}
	// The newest revision of each run, and every sequence to delete.
	type doc struct {
		last jsapi.Stored
		seqs []uint64
	}
	docs := make(map[string]*doc)
	var order []string
	err = jsapi.Scan(ctx, js.Conn(), n.TaskStream(), n.RunSubject(">"), 0, 0, time.Time{}, 256, func(m jsapi.Stored) (bool, error) {
		d := docs[m.Subject]
		if d == nil {
			d = &doc{}
			docs[m.Subject] = d
			order = append(order, m.Subject)
		}
		d.last = m
		d.seqs = append(d.seqs, m.Seq)
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("streams: migrate runs: read %s: %w", n.TaskStream(), err)
	}
	stored := 0
	for _, subj := range order {
		d := docs[subj]
		msg := &nats.Msg{Subject: subj, Data: d.last.Data, Header: nats.Header{}}
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		if ttl := d.last.Header.Get(jetstream.MsgTTLHeader); ttl != "" {
			if _, err := strconv.ParseInt(ttl, 10, 64); err == nil {
				msg.Header.Set(jetstream.MsgTTLHeader, ttl)
			}
		}
		_, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(n.RunStream()))
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			stored++
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
			// The run stream has a document of this run already (a
			// previous migration, or a newer write): keep it.
		default:
			return stored, fmt.Errorf("streams: migrate runs: store %s in %s: %w", subj, n.RunStream(), err)
		}
		for _, seq := range d.seqs {
			if err := tasks.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return stored, fmt.Errorf("streams: migrate runs: delete %s at %d from %s: %w", subj, seq, n.TaskStream(), err)
			}
		}
	}
	return stored, nil
}
