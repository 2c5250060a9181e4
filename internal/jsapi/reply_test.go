package jsapi

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// directReply tells the server's statuses from stored messages, and ends
// in an error, never a panic, on a reply it cannot read.
func TestDirectReply(t *testing.T) {
	stored := func(h nats.Header, data string) *nats.Msg {
		if h == nil {
			h = nats.Header{}
		}
		h.Add("Nats-Stream", "S")
		h.Add("Nats-Subject", "s.a")
		h.Add("Nats-Sequence", "7")
		h.Add("Nats-Time-Stamp", "2026-12-04T12:00:00.123456789Z")
		h.Add("Nats-Num-Pending", "3")
		return &nats.Msg{Header: h, Data: []byte(data)}
	}
	status := func(code, desc string) *nats.Msg {
		return &nats.Msg{Header: nats.Header{"Status": {code}, "Description": {desc}}}
	}
	cases := []struct {
		name    string
		msg     *nats.Msg
		n       int
		wantErr string // "" for none
		noStrm  bool
	}{
		{"a stored message", stored(nil, "x"), 1, "", false},
		{"a stored message with a Status header of its own", stored(nats.Header{"Status": {"404"}}, ""), 1, "", false},
		{"a stored 409 with no body", stored(nats.Header{"Status": {"409"}, "Description": {"consumer deleted"}}, ""), 1, "", false},
		{"end of batch", status("204", "EOB"), 0, "", false},
		{"no message", status("404", "Message Not Found"), 0, "", false},
		{"no stream", status("503", ""), 0, "S", true},
		{"another status", status("408", "Request Timeout"), 0, "status 408 Request Timeout", false},
		{"no headers at all", &nats.Msg{Data: []byte("x")}, 0, "bad sequence header", false},
		{"bad sequence", &nats.Msg{Header: nats.Header{"Nats-Sequence": {"-1"}}}, 0, "bad sequence header", false},
		{"huge sequence", &nats.Msg{Header: nats.Header{"Nats-Sequence": {strings.Repeat("9", 100000)}}}, 0, "bad sequence header", false},
		{"bad time", &nats.Msg{Header: nats.Header{"Nats-Sequence": {"1"}, "Nats-Time-Stamp": {"yesterday"}}}, 0, "bad timestamp header", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []Stored
			n, err := directReply("S", c.msg, func(s Stored) error { got = append(got, s); return nil })
			if n != c.n || len(got) != c.n {
				t.Errorf("n = %d with %d calls; want %d", n, len(got), c.n)
			}
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("error %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("error %v; want one with %q", err, c.wantErr)
			case c.noStrm != errors.Is(err, ErrNoStream):
				t.Errorf("error %v; ErrNoStream %v", err, c.noStrm)
			}
			if err != nil && len(err.Error()) > 200 {
				t.Errorf("error of %d bytes: the wire value is not cut", len(err.Error()))
			}
		})
	}
}

// The server appends its headers after the message's own: a producer's
// forged Nats-Sequence or Nats-Subject loses to the server's last value.
func TestParseDirectTakesServerHeaders(t *testing.T) {
	h := nats.Header{}
	h.Add("Nats-Sequence", "999")
	h.Add("Nats-Subject", "forged")
	h.Add("Nats-Stream", "S")
	h.Add("Nats-Subject", "s.a")
	h.Add("Nats-Sequence", "7")
	h.Add("Nats-Time-Stamp", "2026-12-04T12:00:00Z")
	s, err := parseDirect(&nats.Msg{Header: h, Data: []byte("d")})
	if err != nil {
		t.Fatal(err)
	}
	if s.Seq != 7 || s.Subject != "s.a" || s.NumPending != 0 || string(s.Data) != "d" {
		t.Errorf("parsed %+v", s)
	}
	// A callback's error comes back as it is.
	boom := errors.New("boom")
	h.Set("Nats-Time-Stamp", "2026-12-04T12:00:00Z")
	if _, err := directReply("S", &nats.Msg{Header: h}, func(Stored) error { return boom }); err != boom {
		t.Errorf("callback error: %v", err)
	}
}

func FuzzDirectReply(f *testing.F) {
	f.Add("204", "", "", "", []byte(nil))
	f.Add("", "S", "7", "2026-12-04T12:00:00Z", []byte("x"))
	f.Add("404", "S", "x", "", []byte(nil))
	f.Fuzz(func(t *testing.T, status, stream, seq, ts string, data []byte) {
		h := nats.Header{}
		for k, v := range map[string]string{"Status": status, "Nats-Stream": stream, "Nats-Sequence": seq, "Nats-Time-Stamp": ts} {
			if v != "" {
				h.Set(k, v)
			}
		}
		n, err := directReply("S", &nats.Msg{Header: h, Data: data}, func(Stored) error { return nil })
		if n != 0 && err != nil || n > 1 {
			t.Errorf("n %d err %v", n, err)
		}
	})
}
