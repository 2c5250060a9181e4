package delays

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// A task ID holds one pending schedule: the mover stores a schedule only
// where none is pending, and tells a redelivery of the delayed task that
// stored it (the same origin) from another delayed task under that ID (a
// conflict).

// HeaderOrigin names, on a schedule the mover stored, the delayed task it
// stored it from: "<sequence>@<time>", the task's sequence in the delay
// stream and when the delay stream stored it. Every delivery of one
// delayed task has the same origin; another delayed task with the same ID
// (another producer's, or the same ID enqueued again after the duplicate
// window) has another. The mover sets it itself, replacing any copy a
// producer sent. A fired task keeps it, like every Jetflow-* header of its
// schedule.
const HeaderOrigin = "Jetflow-Delay-Origin"

// origin is the value of [HeaderOrigin] for the delayed task of md.
func origin(md *jetstream.MsgMetadata) string {
	return strconv.FormatUint(md.Sequence.Stream, 10) + "@" + taskmsg.FormatTime(md.Timestamp)
}

// StoredFrom reports whether the schedule with headers h and payload data,
// found pending on a task's schedule subject, was stored from the delayed
// task whose origin ([HeaderOrigin]) is from, with headers th and payload
// tdata: by an earlier delivery of it. A schedule without an origin,
// stored before schedules named theirs, counts as its own when it has the
// task's enqueue time and payload. Anything else on the subject is in the
// way of the task: another delayed task's schedule, or a message that is
// no schedule at all.
func StoredFrom(h nats.Header, data []byte, from string, th nats.Header, tdata []byte) bool {
	if o := h.Get(HeaderOrigin); o != "" {
		return o == from
	}
	at := th.Get(taskmsg.HeaderEnqueuedAt)
	return h.Get(jetstream.ScheduleHeader) != "" && at != "" && h.Get(taskmsg.HeaderEnqueuedAt) == at && bytes.Equal(data, tdata)
}

// Pending is the last message on a schedule subject.
type Pending struct {
	Seq    uint64 // 0: the subject holds none
	Header nats.Header
	Data   []byte
}

// lastSchedule reads the last message on the schedule subject of id from
// the schedule stream's leader (the message get API: a direct get may be
// answered by a replica that has not stored it yet).
func (m *Mover) lastSchedule(ctx context.Context, id string) (Pending, error) {
	subject := m.topo.ScheduleSubject(id)
	req, err := json.Marshal(map[string]string{"last_by_subj": subject})
	if err != nil {
		return Pending{}, err
	}
	resp, err := m.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+m.topo.ScheduleStream, req)
	if err != nil {
		return Pending{}, fmt.Errorf("get the last message of %s: %w", subject, err)
	}
	var r struct {
		Message *struct {
			Seq    uint64 `json:"seq"`
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return Pending{}, fmt.Errorf("get the last message of %s: %w", subject, err)
	}
	switch {
	case r.Error != nil && r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return Pending{}, nil
	case r.Error != nil:
		return Pending{}, fmt.Errorf("get the last message of %s: %w", subject, r.Error)
	case r.Message == nil || r.Message.Seq == 0:
		return Pending{}, fmt.Errorf("get the last message of %s: an answer without a message", subject)
	}
	p := Pending{Seq: r.Message.Seq, Data: r.Message.Data, Header: nats.Header{}}
	if len(r.Message.Header) > 0 {
		// Stored by anyone who may publish there: a header block that
		// does not parse is no schedule a mover wrote.
		if h, err := nats.DecodeHeadersMsg(r.Message.Header); err == nil {
			p.Header = h
		}
	}
	return p, nil
}
