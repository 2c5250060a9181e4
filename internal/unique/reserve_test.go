package unique

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

const markerTTL = time.Second

func newBucket(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	_, js := testutil.JetStream(t, testutil.RunServer(t))
	var c Cache
	kv, err := c.Ensure(t.Context(), js, "UNIQUE", "NO_TASK_STREAM", markerTTL)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := c.Ensure(t.Context(), js, "UNIQUE", "NO_TASK_STREAM", markerTTL); err != nil || again != kv {
		t.Fatalf("second Ensure = %v, %v; want the cached bucket", again, err)
	}
	return js, kv
}

func uniqueHeaders(t *testing.T, s Spec, taskType, payload string) nats.Header {
	t.Helper()
	h := nats.Header{}
	for k, v := range s.Headers(taskType, []byte(payload), time.Now(), nil) {
		h.Set(k, v)
	}
	return h
}

// A second task with the same uniqueness key is refused while the first
// holds it, and told who holds it; once released, the key is free again.
func TestReserveTaskHeldAndReleased(t *testing.T) {
	t.Parallel()
	_, kv := newBucket(t)
	s := Spec{Period: time.Hour}
	h1 := uniqueHeaders(t, s, "email", "same")
	r, held, _, err := rules.ReserveTask(t.Context(), kv, h1, "t1", "email", markerTTL)
	if err != nil || held || r == nil {
		t.Fatalf("first: %v, held %v, %v", r, held, err)
	}
	if h1.Get(HeaderRevision) != "" {
		t.Errorf("a task that does not release early got revision %q", h1.Get(HeaderRevision))
	}
	_, held, holder, err := rules.ReserveTask(t.Context(), kv, uniqueHeaders(t, s, "email", "same"), "t2", "email", markerTTL)
	if err != nil || !held || holder != "t1" {
		t.Fatalf("second: held %v by %q, %v; want held by t1", held, holder, err)
	}
	if _, held, _, err := rules.ReserveTask(t.Context(), kv, uniqueHeaders(t, s, "email", "other"), "t3", "email", markerTTL); held || err != nil {
		t.Errorf("another payload: held %v, %v; want free", held, err)
	}
	if err := r.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, held, _, err := rules.ReserveTask(t.Context(), kv, uniqueHeaders(t, s, "email", "same"), "t4", "email", markerTTL); held || err != nil {
		t.Errorf("after release: held %v, %v; want free", held, err)
	}
}

// A holder whose reservation cannot be read, or whose ID fails
// validation, is reported as "".
func TestReserveHolderUnreadable(t *testing.T) {
	t.Parallel()
	_, kv := newBucket(t)
	key := "email." + strings.Repeat("a", 64)
	v := rules
	v.ID = func(id string) error {
		if strings.ContainsAny(id, "\r\n") {
			return errors.New("bad id")
		}
		return nil
	}
	for _, val := range []string{"{not json", `{"id":"x\ny","type":"email"}`} {
		if _, err := kv.Put(t.Context(), key, []byte(val)); err != nil {
			t.Fatal(err)
		}
		_, held, holder, err := v.Reserve(t.Context(), kv, key, Reservation{TaskID: "t1", Type: "email", Until: time.Now().Add(time.Hour)})
		if !held || holder != "" || err != nil {
			t.Errorf("over %q: held %v by %q, %v; want held by \"\"", val, held, holder, err)
		}
	}
	if _, _, _, err := rules.ReserveTask(t.Context(), kv, nats.Header{HeaderKey: {key}, HeaderUntil: {"tomorrow"}}, "t1", "email", markerTTL); err == nil {
		t.Error("an unparsable until was accepted")
	}
}

// A task that releases its reservation when it succeeds gets the
// reservation's revision, and releases exactly that reservation: a
// stale revision (the reservation expired and another task took it)
// releases nothing; invalid headers are an ErrHeader.
func TestReleaseDone(t *testing.T) {
	t.Parallel()
	js, kv := newBucket(t)
	cut := func(s string, n int) string { return s[:min(len(s), n)] }
	h := uniqueHeaders(t, Spec{Period: time.Hour, Key: "order-1", HasKey: true, UntilDone: true}, "email", "")
	if _, held, _, err := rules.ReserveTask(t.Context(), kv, h, "t1", "email", markerTTL); held || err != nil {
		t.Fatalf("reserve: held %v, %v", held, err)
	}
	rev, err := strconv.ParseUint(h.Get(HeaderRevision), 10, 64)
	if err != nil || rev == 0 {
		t.Fatalf("revision header %q", h.Get(HeaderRevision))
	}
	key := h.Get(HeaderKey)
	var c Cache
	stale := nats.Header{HeaderKey: {key}, HeaderRevision: {strconv.FormatUint(rev+100, 10)}}
	if err := c.ReleaseDone(t.Context(), js, "UNIQUE", rules, "email", stale, markerTTL, cut); err != nil {
		t.Fatalf("stale revision: %v", err)
	}
	if _, err := kv.Get(t.Context(), key); err != nil {
		t.Fatalf("a stale revision released the reservation: %v", err)
	}
	for name, bad := range map[string]nats.Header{
		"another type's key":    {HeaderKey: {"sms." + strings.Repeat("0", 64)}, HeaderRevision: {"1"}},
		"revision zero":         {HeaderKey: {key}, HeaderRevision: {"0"}},
		"revision not a number": {HeaderKey: {key}, HeaderRevision: {strings.Repeat("9", 1000)}},
		"key too long":          {HeaderKey: {strings.Repeat("e", 10000)}, HeaderRevision: {"1"}},
	} {
		err := c.ReleaseDone(t.Context(), js, "UNIQUE", rules, "email", bad, markerTTL, cut)
		if !errors.Is(err, ErrHeader) || len(err.Error()) > 300 {
			t.Errorf("%s: %.300v; want a short ErrHeader", name, err)
		}
	}
	if err := c.ReleaseDone(t.Context(), js, "UNIQUE", rules, "email", nats.Header{}, markerTTL, cut); err != nil {
		t.Errorf("no revision: %v", err)
	}
	if err := c.ReleaseDone(t.Context(), js, "UNIQUE", rules, "email", h, markerTTL, cut); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(t.Context(), key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the reservation is still there after its release: %v", err)
	}
	var unbound Cache
	if _, err := unbound.Bind(t.Context(), js, "NO_BUCKET"); !errors.Is(err, ErrBucket) {
		t.Errorf("Bind of a missing bucket: %v; want ErrBucket", err)
	}
}

// List shows the valid reservations of one type, or of every type.
func TestList(t *testing.T) {
	t.Parallel()
	js, kv := newBucket(t)
	for i, typ := range []string{"email", "email", "sms"} {
		h := uniqueHeaders(t, Spec{Period: time.Hour}, typ, strconv.Itoa(i))
		if _, _, _, err := rules.ReserveTask(t.Context(), kv, h, "t"+strconv.Itoa(i), typ, markerTTL); err != nil {
			t.Fatal(err)
		}
	}
	hash := strings.Repeat("b", 64)
	for k, v := range map[string]string{
		"email." + hash:            "{not json",                 // unreadable
		"email." + hash[:63] + "c": `{"id":"x","type":"sms"}`,   // type differs from its key's
		"email.short":              `{"id":"x","type":"email"}`, // not a unique key
	} {
		if _, err := kv.Put(t.Context(), k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	all, err := rules.List(t.Context(), js, "UNIQUE", "")
	if err != nil || len(all) != 3 {
		t.Fatalf("List of all = %d, %v; want 3", len(all), err)
	}
	emails, err := rules.List(t.Context(), js, "UNIQUE", "email")
	if err != nil || len(emails) != 2 {
		t.Fatalf("List of email = %d, %v; want 2", len(emails), err)
	}
	for _, r := range emails {
		if r.Type != "email" || r.Revision == 0 || r.Key == "" || r.Until.IsZero() {
			t.Errorf("reservation %+v", r)
		}
	}
	if got, err := rules.List(t.Context(), js, "NO_BUCKET", ""); got != nil || err != nil {
		t.Errorf("missing bucket: %v, %v", got, err)
	}
}

// ParseKey ends in an error, never a panic, on odd keys.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"", "email." + strings.Repeat("a", 64), strings.Repeat(".", 66), "é." + strings.Repeat("0", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		typ, err := rules.ParseKey(key)
		if err == nil && key != typ+"."+key[len(typ)+1:] {
			t.Errorf("ParseKey(%q) = %q", key, typ)
		}
	})
}
