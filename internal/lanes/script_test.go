package lanes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A script drives a gate of string handles step by step. Each step is an
// operation and the handles it must return, space separated:
//
//	recv KEY SEQ [@DSEQ]  Receive; the handle is KEY+SEQ, or KEY+SEQ@DSEQ
//	                      when the delivery sequence is given (it is
//	                      otherwise one more than the last); a stale
//	                      handle is listed with a leading "~"
//	done KEY SEQ          Done, acked
//	nak KEY SEQ           Done, redelivered
//	forget KEY SEQ        Forget
//	recheck               Recheck
//	acquired              Acquired (returns nothing)
//	check PENDING DSEQ    Check; "open" is listed when it reports open
//	lost                  Lost: the handles handed back
type step struct {
	op   string
	want string
}

type script struct {
	t    *testing.T
	g    *Gate[string]
	dseq uint64
}

// opened returns a script over a gate of cfg that holds the lane's pin
// and has passed its check.
func opened(t *testing.T, cfg Config) *script {
	t.Helper()
	s := &script{t: t, g: New[string](cfg)}
	s.run(step{"acquired", ""}, step{"check 0 0", "open"})
	return s
}

func (s *script) run(steps ...step) {
	s.t.Helper()
	for i, st := range steps {
		got := s.do(st.op)
		if want := strings.Fields(st.want); !slices.Equal(got, want) {
			s.t.Fatalf("step %d %q returned %q, want %q", i, st.op, got, want)
		}
	}
}

func (s *script) do(op string) []string {
	s.t.Helper()
	f := strings.Fields(op)
	num := func(i int) uint64 {
		n, err := strconv.ParseUint(strings.TrimPrefix(f[i], "@"), 10, 64)
		if err != nil {
			s.t.Fatalf("bad step %q: %v", op, err)
		}
		return n
	}
	switch f[0] {
	case "recv":
		it := Item[string]{Key: f[1], Seq: num(2), V: f[1] + f[2]}
		if len(f) > 3 {
			it.DSeq, it.V = num(3), it.V+f[3]
			s.dseq = max(s.dseq, it.DSeq)
		} else {
			s.dseq++
			it.DSeq = s.dseq
		}
		start, stale, isStale := s.g.Receive(it)
		if isStale {
			start = append(start, "~"+stale)
		}
		return start
	case "done", "nak":
		return s.g.Done(f[1], num(2), f[0] == "nak")
	case "forget":
		return s.g.Forget(f[1], num(2))
	case "recheck":
		return s.g.Recheck()
	case "acquired":
		s.g.Acquired()
		return nil
	case "check":
		start, open := s.g.Check(int(num(1)), num(2))
		if open {
			start = append(start, "open")
		}
		return start
	case "lost":
		return s.g.Lost()
	}
	s.t.Fatalf("bad step %q", op)
	return nil
}

// empty fails unless the gate holds no state at all.
func (s *script) empty() {
	s.t.Helper()
	if n := len(s.g.keys); n != 0 || s.g.Held() != 0 || len(s.g.Awaiting()) != 0 {
		s.t.Fatalf("gate still holds %d keys (%v), %d held, awaiting %v", n, s.g.Keys(), s.g.Held(), s.g.Awaiting())
	}
}

// keys fails unless the gate's per-key counts read want, as
// "key:waiting/running/awaited" by key.
func (s *script) keys(want string) {
	s.t.Helper()
	var got []string
	for _, k := range s.g.Keys() {
		got = append(got, fmt.Sprintf("%s:%d/%d/%d", k.Key, k.Waiting, k.Running, k.Awaited))
	}
	if !slices.Equal(got, strings.Fields(want)) {
		s.t.Fatalf("keys %q, want %q", got, want)
	}
}
