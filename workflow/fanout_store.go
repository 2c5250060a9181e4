package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The messages of a fan-out in the run stream: its items, its state, and
// reading them back (fanout.go).

// ttl sets the message TTL of a fan-out message: the workflow's
// retention.
func (rt *runtime) ttl(d *Definition, m *nats.Msg) {
	m.Header.Set(jetstream.MsgTTLHeader, strconv.FormatInt(int64(max(d.retention, time.Second)/time.Second), 10))
}

// putInputs stores each item on its subject.
func (rt *runtime) putInputs(ctx context.Context, d *Definition, runID, step string, items []json.RawMessage) error {
	msgs := make([]*nats.Msg, len(items))
	for i, it := range items {
		msgs[i] = &nats.Msg{Subject: rt.store.inSubject(runID, step, i), Data: it, Header: nats.Header{}}
		rt.ttl(d, msgs[i])
	}
	return rt.publishWindowed(ctx, msgs)
}

// publishWindowed publishes msgs as publishTasks does, at most 1,024
// awaiting their acknowledgements at a time (a fan-out may have 100,000).
func (rt *runtime) publishWindowed(ctx context.Context, msgs []*nats.Msg) error {
	const window = 1024
	for len(msgs) > 0 {
		n := min(len(msgs), window)
		if err := rt.store.publishTasks(ctx, msgs[:n]); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// put stores data on subject of the run stream, expecting its last
// sequence to be expect (0: no message); errConflict when it is not.
func (rt *runtime) put(ctx context.Context, d *Definition, subject string, data []byte, expect uint64) (uint64, error) {
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
	rt.ttl(d, m)
	resp, err := rt.store.nc.RequestMsgWithContext(ctx, m)
	var seq uint64
	if err == nil {
		seq, err = rt.store.parseAck(resp)
	}
	if err != nil {
		return 0, rt.store.publishErr(subject, err)
	}
	return seq, nil
}

// putFan creates the fan-out state fs (errConflict when it exists).
func (rt *runtime) putFan(ctx context.Context, d *Definition, runID, step string, fs *fanState) error {
	data, err := json.Marshal(fs)
	if err != nil {
		return err
	}
	_, err = rt.put(ctx, d, rt.store.fanSubject(runID, step), data, 0)
	return err
}

// last reads the last message on subject of the run stream: from the
// leader when leader is set, else by a direct get. It returns nil data
// and no error when there is none.
func (s *store) last(ctx context.Context, subject string, leader bool) ([]byte, uint64, error) {
	if leader {
		data, seq, err := s.lastFromLeader(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, 0, nil
		}
		return data, seq, err
	}
	st, err := s.runStream(ctx)
	if err != nil {
		return nil, 0, err
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return m.Data, m.Sequence, nil
}

// loadFan reads the fan-out state of step of run runID; nil when there is
// none.
func (s *store) loadFan(ctx context.Context, runID, step string, leader bool) (*fanState, error) {
	data, seq, err := s.last(ctx, s.fanSubject(runID, step), leader)
	if err != nil || data == nil {
		return nil, err
	}
	fs := new(fanState)
	if err := json.Unmarshal(data, fs); err != nil {
		return nil, fmt.Errorf("%w: fan-out %s of run %s: %w", errCorrupt, step, runID, err)
	}
	if fs.Total < 0 || fs.Total > MaxItems || len(fs.Counted) != (fs.Total+7)/8 || fs.Released > fs.Total || fs.Done > fs.Total {
		return nil, fmt.Errorf("%w: fan-out %s of run %s: inconsistent counts", errCorrupt, step, runID)
	}
	fs.seq = seq
	return fs, nil
}
