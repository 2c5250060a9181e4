package deadletter

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// Text makes any string a safe header value: no control character (a line
// break would end the header), valid UTF-8, at most n bytes with "…" when
// cut.
func TestText(t *testing.T) {
	cases := []struct {
		name, in string
		n        int
		want     string
	}{
		{"plain", "boom", 10, "boom"},
		{"line breaks become spaces", "a\r\nb", 10, "a  b"},
		{"tab and DEL become spaces", "a\tb\x7fc", 10, "a b c"},
		{"invalid UTF-8 is replaced", "a\xffb", 10, "a?b"},
		{"exactly n bytes is kept", "abcdef", 6, "abcdef"},
		{"cut with an ellipsis", "abcdefghij", 6, "abc…"},
		{"cut at a character boundary", "ééééé", 7, "éé…"},
		{"empty", "", 4, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Text(c.in, c.n)
			if got != c.want {
				t.Errorf("Text(%q, %d) = %q; want %q", c.in, c.n, got, c.want)
			}
			if len(got) > c.n || !utf8.ValidString(got) {
				t.Errorf("Text(%q, %d) = %q: longer than %d bytes or invalid UTF-8", c.in, c.n, got, c.n)
			}
		})
	}
}

// Hostile error texts: huge, all control characters, all invalid bytes.
func TestTextHostile(t *testing.T) {
	for _, in := range []string{
		strings.Repeat("x", 1<<20),
		strings.Repeat("\n\x00", 5000),
		strings.Repeat("\xff\xfe", 5000),
		strings.Repeat("€", 1000),
	} {
		got := Text(in, MaxErrorLen)
		if len(got) > MaxErrorLen || !utf8.ValidString(got) || strings.ContainsAny(got, "\r\n\x00") {
			t.Errorf("Text of %d bytes gives %d bytes, valid UTF-8 %v", len(in), len(got), utf8.ValidString(got))
		}
	}
}

func TestIsRecordHeader(t *testing.T) {
	for _, k := range []string{HeaderType, HeaderReason, HeaderDeadCount, HeaderRoutedBy, HeaderHeadersOmitted, HeaderPayloadOmitted} {
		if !IsRecordHeader(k) {
			t.Errorf("IsRecordHeader(%q) = false", k)
		}
	}
	for _, k := range []string{taskmsg.HeaderTaskID, "X-Custom", HeaderReplayedAt, "jetflow-type", ""} {
		if IsRecordHeader(k) {
			t.Errorf("IsRecordHeader(%q) = true", k)
		}
	}
}

func TestHasNatsPrefix(t *testing.T) {
	cases := map[string]bool{"Nats-Msg-Id": true, "nats-rollup": true, "NATS-": true, "Nats": false, "X-Nats-A": false, "": false}
	for k, want := range cases {
		if got := hasNatsPrefix(k); got != want {
			t.Errorf("hasNatsPrefix(%q) = %v; want %v", k, got, want)
		}
	}
}

// fitHeaders drops the task's own headers, largest first, until the record
// fits, names them, and keeps the record's headers and the task ID.
func TestFitHeaders(t *testing.T) {
	big := strings.Repeat("b", 40<<10)
	medium := strings.Repeat("m", 25<<10)
	h := map[string][]string{
		"X-Big":                {big},
		"X-Medium":             {medium},
		"X-Small":              {"s"},
		HeaderReason:           {ReasonPermanent},
		taskmsg.HeaderTaskID:   {strings.Repeat("i", 100)},
		jetstream.MsgIDHeader:  {"dlq-x-1"},
		HeaderLastError:        {strings.Repeat("e", MaxErrorLen)},
		HeaderOriginalSubject:  {"jetflow.task.normal.a"},
		HeaderDeliveries:       {"3"},
		HeaderDeadCount:        {"1"},
		HeaderType:             {"a"},
		HeaderRoutedBy:         {routedByWorker},
		HeaderPriority:         {"normal"},
		HeaderOriginalSeq:      {"1"},
		HeaderDeadAt:           {"2026-12-04T00:00:00Z"},
		HeaderLastErrorAttempt: {"3"},
		HeaderFirstFailure:     {"2026-12-04T00:00:00Z"},
		HeaderLastFailure:      {"2026-12-04T00:00:00Z"},
	}
	fitHeaders(h)
	if n := headerBytes(h); n > maxRecordHeaderBytes {
		t.Fatalf("headers still %d bytes, limit %d", n, maxRecordHeaderBytes)
	}
	if _, ok := h["X-Big"]; ok {
		t.Error("the largest task header was kept")
	}
	if _, ok := h["X-Medium"]; !ok {
		t.Error("X-Medium was dropped although dropping X-Big was enough")
	}
	if _, ok := h["X-Small"]; !ok {
		t.Error("X-Small was dropped")
	}
	for _, k := range []string{HeaderReason, taskmsg.HeaderTaskID, jetstream.MsgIDHeader, HeaderLastError} {
		if _, ok := h[k]; !ok {
			t.Errorf("%s was dropped", k)
		}
	}
	if got := h[HeaderHeadersOmitted]; len(got) != 1 || got[0] != "X-Big" {
		t.Errorf("%s = %q; want [X-Big]", HeaderHeadersOmitted, got)
	}
}

// Many task headers, none large: several go, and the list naming them is
// cut to MaxErrorLen.
func TestFitHeadersManySmall(t *testing.T) {
	h := map[string][]string{HeaderReason: {ReasonPermanent}}
	for i := range 2000 {
		h["X-Header-"+strings.Repeat("k", 20)+string(rune('a'+i%26))+strings.Repeat("z", i%7)+itoa(i)] = []string{strings.Repeat("v", 60)}
	}
	fitHeaders(h)
	if n := headerBytes(h); n > maxRecordHeaderBytes {
		t.Fatalf("headers still %d bytes", n)
	}
	om := h[HeaderHeadersOmitted]
	if len(om) != 1 || om[0] == "" || len(om[0]) > MaxErrorLen {
		t.Fatalf("%s = %d values, first of %d bytes", HeaderHeadersOmitted, len(om), len(om[0]))
	}
	if _, ok := h[HeaderReason]; !ok {
		t.Error("the record's reason was dropped")
	}
}

// Headers that fit are left alone.
func TestFitHeadersUnderLimit(t *testing.T) {
	h := map[string][]string{"X-A": {"a"}, HeaderReason: {ReasonDecode}}
	fitHeaders(h)
	if len(h) != 2 {
		t.Errorf("headers changed: %v", h)
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// deadBound trusts the last delivered sequence only when nothing awaits an
// acknowledgement.
func TestDeadBound(t *testing.T) {
	cases := []struct {
		name    string
		pending int
		want    uint64
	}{
		{"nothing pending: all delivered", 0, 10},
		{"something pending: the ack floor", 1, 4},
	}
	for _, c := range cases {
		info := &jetstream.ConsumerInfo{NumAckPending: c.pending,
			Delivered: jetstream.SequenceInfo{Stream: 10}, AckFloor: jetstream.SequenceInfo{Stream: 4}}
		if got := deadBound(info); got != c.want {
			t.Errorf("%s: deadBound = %d; want %d", c.name, got, c.want)
		}
	}
}

func TestTopologyTask(t *testing.T) {
	topo := testTopo
	topo.Ordered = func(s string) (string, bool) { return strings.CutPrefix(s, "jetflow.ordered.") }
	cases := []struct {
		subject, typ, prio string
		ok                 bool
	}{
		{"jetflow.task.high.payments.charge", "payments.charge", "high", true},
		{"jetflow.ordered.emails", "emails", "normal", true},
		{"jetflow.task.high", "", "", false},
		{"jetflow.sched.abc", "", "", false},
		{"", "", "", false},
	}
	for _, c := range cases {
		typ, prio, ok := topo.task(c.subject)
		if typ != c.typ || prio != c.prio || ok != c.ok {
			t.Errorf("task(%q) = %q, %q, %v; want %q, %q, %v", c.subject, typ, prio, ok, c.typ, c.prio, c.ok)
		}
	}
	if _, _, ok := testTopo.task("jetflow.ordered.emails"); ok {
		t.Error("a slot subject parsed without an Ordered parser")
	}
}

func TestTaskFilters(t *testing.T) {
	topo := testTopo
	topo.ReadsSlot = func(subject, consumer string) bool {
		return strings.HasPrefix(subject, "jetflow.ordered.") && strings.HasPrefix(consumer, "ordered-")
	}
	c := &Core{topo: topo}
	cases := []struct {
		name string
		cfg  jetstream.ConsumerConfig
		want []string
	}{
		{"a work consumer", jetstream.ConsumerConfig{FilterSubject: "jetflow.task.low.a"}, []string{"jetflow.task.low.a"}},
		{"a partition consumer", jetstream.ConsumerConfig{Durable: "ordered-a-0", MaxDeliver: 3,
			FilterSubjects: []string{"jetflow.ordered.a.0", "jetflow.ordered.a.1"}}, []string{"jetflow.ordered.a.0", "jetflow.ordered.a.1"}},
		{"a partition consumer that never gives up", jetstream.ConsumerConfig{Durable: "ordered-a-0", MaxDeliver: -1,
			FilterSubjects: []string{"jetflow.ordered.a.0"}}, nil},
		{"another consumer's filters", jetstream.ConsumerConfig{Durable: "mine", MaxDeliver: 3,
			FilterSubjects: []string{"jetflow.ordered.a.0"}}, nil},
		{"a foreign single filter", jetstream.ConsumerConfig{FilterSubject: "other.>"}, nil},
		{"no filter", jetstream.ConsumerConfig{}, nil},
	}
	for _, tc := range cases {
		got := c.taskFilters(tc.cfg)
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: taskFilters = %q; want %q", tc.name, got, tc.want)
		}
	}
}
