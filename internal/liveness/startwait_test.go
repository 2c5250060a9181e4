package liveness

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// A step is listed while it runs, the longest waiting first, and no
// longer once it returns; its error comes back.
func TestStartWaitsList(t *testing.T) {
	t.Parallel()
	var s StartWaits
	if got := s.List(); len(got) != 0 {
		t.Fatalf("zero value lists %v", got)
	}
	firstIn, secondIn := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = s.WaitingFor("b first", func() error { close(firstIn); <-release; return nil })
	})
	<-firstIn
	boom := errors.New("boom")
	var err error
	wg.Go(func() {
		err = s.WaitingFor("a second", func() error { close(secondIn); <-release; return boom })
	})
	<-secondIn
	got := s.List()
	if len(got) != 2 || got[0].What != "b first" || got[1].What != "a second" {
		t.Fatalf("List = %v, want the longest waiting first", got)
	}
	close(release)
	wg.Wait()
	if !errors.Is(err, boom) {
		t.Errorf("WaitingFor returned %v, want the step's error", err)
	}
	if got := s.List(); len(got) != 0 {
		t.Errorf("after the steps, List = %v", got)
	}
}

// Slow lists only the steps that have waited at least the limit.
func TestStartWaitsSlow(t *testing.T) {
	t.Parallel()
	var s StartWaits
	in, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.WaitingFor("consumer X", func() error { close(in); <-release; return nil })
	}()
	<-in
	since := s.List()[0].Since
	if got := s.Slow(since.Add(4*time.Second), 5*time.Second); len(got) != 0 {
		t.Errorf("Slow before the limit = %v", got)
	}
	got := s.Slow(since.Add(6*time.Second), 5*time.Second)
	if len(got) != 1 || got[0] != "consumer X for 6s" {
		t.Errorf("Slow after the limit = %v, want [consumer X for 6s]", got)
	}
	close(release)
	<-done
}

// ReportSlow warns of a step that waits longer than its interval, and stop
// ends it.
func TestStartWaitsReportSlow(t *testing.T) {
	t.Parallel()
	var s StartWaits
	logged := make(chan string, 16)
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) {
		select {
		case logged <- string(p):
		default: // the test reads the first; later ones may be dropped
		}
	}), nil))
	in, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.WaitingFor("consumer Y", func() error { close(in); <-release; return nil })
	}()
	<-in
	stop := s.ReportSlow(log, time.Millisecond, time.Now)
	select {
	case line := <-logged:
		if !strings.Contains(line, "start is slow") || !strings.Contains(line, "consumer Y for") {
			t.Errorf("logged %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no warning of a slow step")
	}
	stop()
	close(release)
	<-done
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(bytes.Clone(p)); return len(p), nil }
