package deadletter

import (
	"cmp"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// maxRecordHeaderBytes bounds the headers of a record: the server refuses a
// message whose headers exceed 65,535 bytes; the rest is room for slack.
const maxRecordHeaderBytes = 60 << 10

// headerBytes is the size of h on the wire.
func headerBytes(h map[string][]string) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// fitHeaders removes the task's own headers from a record's headers h,
// largest first, until h fits maxRecordHeaderBytes, and names them in
// [HeaderHeadersOmitted]. A task accepted with headers near the server's
// limit would otherwise give a record the server refuses, and be retried
// forever. The record's own headers and the task ID stay.
func fitHeaders(h map[string][]string) {
	total := headerBytes(h)
	if total <= maxRecordHeaderBytes {
		return
	}
	type entry struct {
		k    string
		size int
	}
	var cands []entry
	for k, vs := range h {
		if IsRecordHeader(k) || k == taskmsg.HeaderTaskID || k == jetstream.MsgIDHeader {
			continue
		}
		size := 0
		for _, v := range vs {
			size += len(k) + len(": \r\n") + len(v)
		}
		cands = append(cands, entry{k, size})
	}
	slices.SortFunc(cands, func(a, b entry) int { return cmp.Compare(b.size, a.size) })
	reserve := len(HeaderHeadersOmitted) + len(": \r\n") + MaxErrorLen
	var omitted []string
	for _, e := range cands {
		if total+reserve <= maxRecordHeaderBytes {
			break
		}
		delete(h, e.k)
		total -= e.size
		omitted = append(omitted, e.k)
	}
	if len(omitted) > 0 {
		h[HeaderHeadersOmitted] = []string{Text(strings.Join(omitted, ","), MaxErrorLen)}
	}
}
