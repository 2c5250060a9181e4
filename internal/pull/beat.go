package pull

import "time"

// Heartbeats for the queue.
//
// A message's ack clock starts when the server delivers it, not when Next
// returns it. While the caller waits for a slot for one task, the tasks
// behind it in the queue wait too; with enough work ahead of them (a slow
// slot, higher priorities, a loaded machine) they would reach their ack wait
// and be redelivered, spending an attempt, although the worker holds them.
// The worker's heartbeat sweeper therefore calls [Iter.BeatQueued] with the
// same rule it applies to the tasks it holds, and a message taken out of the
// queue reports its last heartbeat ([Msg.LastBeat]) so that the sweeper
// continues its rhythm instead of restarting it.

// BeatQueued sends InProgress for every queued message whose next heartbeat
// cannot wait until next (Unix nanoseconds), every being the heartbeat
// interval, and stamps it with now. It calls failed, without locks held, for
// each heartbeat that could not be sent. A stopped iterator has no queue.
func (p *Iter) BeatQueued(now time.Time, next int64, every time.Duration, failed func(*Msg, error)) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	var due []*Msg
	for _, q := range p.queue {
		if next-q.beat.Load() > int64(every) {
			due = append(due, q)
		}
	}
	p.mu.Unlock()
	stamp := now.UnixNano()
	for _, q := range due {
		// A message taken meanwhile is the same *Msg: the stamp follows it.
		if err := p.nc.Publish(q.msg.Reply, ackProgressBody); err != nil {
			failed(q, err)
			continue
		}
		q.beat.Store(stamp)
	}
}

// LastBeat returns when m reached the iterator's queue or last got a
// heartbeat there: its ack clock runs from then. It is zero for a message
// not delivered by an Iter.
func (m *Msg) LastBeat() time.Time {
	b := m.beat.Load()
	if b == 0 {
		return time.Time{}
	}
	return time.Unix(0, b)
}
