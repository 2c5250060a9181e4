package cronexpr

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, spec string) *Expr {
	t.Helper()
	e, err := Parse(spec)
	if err != nil {
		t.Fatalf("Parse(%q): %v", spec, err)
	}
	return e
}

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("time zone %s not available: %v", name, err)
	}
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseNormalises(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"*/5 * * * *", "0 */5 * * * *"},
		{"  0   30 9 * * mon-fri ", "0 30 9 * * mon-fri"},
		{"@every 1s", "@every 1s"},
		{"@every 90s", "@every 1m30s"},
		{"@hourly", "@hourly"},
		{"0 0 12 ? * *", "0 0 12 ? * *"},
	} {
		if got := mustParse(t, tc.in).String(); got != tc.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
	}
	if d, ok := mustParse(t, "@every 2m").Every(); !ok || d != 2*time.Minute {
		t.Errorf("Every() = %v, %v", d, ok)
	}
	if _, ok := mustParse(t, "@daily").Every(); ok {
		t.Error("@daily reported as @every")
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, mention string }{
		{"", "empty"},
		{"* * * *", "4 fields"},
		{"* * * * * * *", "7 fields"},
		{"0 25 * * *", "hour"},
		{"60 * * * * *", "second"},
		{"0 0 0 0 * *", "day of month"},
		{"0 0 0 * 13 *", "month"},
		{"0 0 0 * * 7", "use 0 for Sunday"},
		{"0 0 0 * * foo", "day of week"},
		{"*/0 * * * * *", "positive"},
		{"5-1 * * * * *", "after end"},
		{"1-2-3 * * * * *", "hyphens"},
		{"*/2/3 * * * * *", "slashes"},
		{"1,,2 * * * * *", "empty list"},
		{"+5 * * * * *", "not a number"},
		{"0 0 0 30 2 *", "never fires"},
		{"@every 500ms", "minimum"},
		{"@every 1500ms", "whole number"},
		{"@every soon", "duration"},
		{"@at 2030-01-01T00:00:00Z", "one-shot"},
		{"@Hourly", "unknown descriptor"},
		{"@fortnightly", "unknown descriptor"},
		{strings.Repeat("1,", 200) + "1 * * * * *", "limit"},
	} {
		_, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) accepted", tc.in)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) error %v does not wrap ErrInvalid", tc.in, err)
		}
		if !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("Parse(%q) error %q does not mention %q", tc.in, err, tc.mention)
		}
	}
}

func TestNextKnownAnswers(t *testing.T) {
	t.Parallel()
	ny := mustLoc(t, "America/New_York")
	ktm := mustLoc(t, "Asia/Kathmandu")
	for _, tc := range []struct {
		spec  string
		loc   *time.Location
		after string
		want  string
	}{
		{"* * * * * *", nil, "2026-03-01T10:00:00Z", "2026-03-01T10:00:01Z"},
		{"* * * * * *", nil, "2026-03-01T10:00:00.5Z", "2026-03-01T10:00:01Z"},
		{"*/5 * * * *", nil, "2026-03-01T10:02:07Z", "2026-03-01T10:05:00Z"},
		{"0 30 9 * * mon-fri", nil, "2026-03-06T10:00:00Z", "2026-03-09T09:30:00Z"}, // Fri → Mon
		{"@hourly", nil, "2026-03-01T10:00:00Z", "2026-03-01T11:00:00Z"},
		{"@daily", nil, "2026-12-31T23:59:59Z", "2027-01-01T00:00:00Z"},
		{"@weekly", nil, "2026-03-01T00:00:00Z", "2026-03-08T00:00:00Z"}, // 2026-03-01 is a Sunday
		{"@monthly", nil, "2026-01-31T12:00:00Z", "2026-02-01T00:00:00Z"},
		{"@yearly", nil, "2026-06-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"0 0 0 29 2 *", nil, "2026-03-01T00:00:00Z", "2028-02-29T00:00:00Z"},
		// Both day fields restricted: either matches (the 15th or a Monday).
		{"0 0 0 15 * mon", nil, "2026-03-10T00:00:00Z", "2026-03-15T00:00:00Z"},
		{"0 0 0 15 * mon", nil, "2026-03-15T00:00:00Z", "2026-03-16T00:00:00Z"},
		// "*/2" in day of month is a restriction, not a star.
		{"0 0 0 */2 * mon", nil, "2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z"},
		// Time zones: 9:00 in New York is 13:00 UTC in summer, 14:00 in winter.
		{"0 0 9 * * *", ny, "2026-07-01T00:00:00Z", "2026-07-01T13:00:00Z"},
		{"0 0 9 * * *", ny, "2026-01-15T00:00:00Z", "2026-01-15T14:00:00Z"},
		// Kathmandu is UTC+5:45.
		{"0 0 9 * * *", ktm, "2026-01-15T00:00:00Z", "2026-01-15T03:15:00Z"},
		// Spring forward in New York (2026-03-08, 2:00 → 3:00): 2:30 does not
		// exist that day and is skipped, as the server does.
		{"0 30 2 * * *", ny, "2026-03-08T05:00:00Z", "2026-03-09T06:30:00Z"},
	} {
		got := mustParse(t, tc.spec).Next(utc(tc.after), tc.loc)
		if want := utc(tc.want); !got.Equal(want) {
			t.Errorf("Next(%q, %v, %s) = %s, want %s", tc.spec, tc.loc, tc.after, got.UTC().Format(time.RFC3339), tc.want)
		}
	}
}

func TestPrevKnownAnswers(t *testing.T) {
	t.Parallel()
	ny := mustLoc(t, "America/New_York")
	for _, tc := range []struct {
		spec   string
		loc    *time.Location
		before string
		want   string
	}{
		{"* * * * * *", nil, "2026-03-01T10:00:00Z", "2026-03-01T09:59:59Z"},
		{"* * * * * *", nil, "2026-03-01T10:00:00.5Z", "2026-03-01T10:00:00Z"},
		{"*/5 * * * *", nil, "2026-03-01T10:05:00Z", "2026-03-01T10:00:00Z"},
		{"0 30 9 * * mon-fri", nil, "2026-03-09T09:30:00Z", "2026-03-06T09:30:00Z"},
		{"@daily", nil, "2027-01-01T00:00:00Z", "2026-12-31T00:00:00Z"},
		{"@yearly", nil, "2027-01-01T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"0 0 0 29 2 *", nil, "2028-02-29T00:00:00Z", "2024-02-29T00:00:00Z"},
		{"0 0 0 31 * *", nil, "2026-05-01T00:00:00Z", "2026-03-31T00:00:00Z"},
		{"0 0 9 * * *", ny, "2026-07-02T13:00:00Z", "2026-07-01T13:00:00Z"},
	} {
		got := mustParse(t, tc.spec).Prev(utc(tc.before), tc.loc)
		if want := utc(tc.want); !got.Equal(want) {
			t.Errorf("Prev(%q, %v, %s) = %s, want %s", tc.spec, tc.loc, tc.before, got.UTC().Format(time.RFC3339), tc.want)
		}
	}
}

func TestEveryHasNoCronTimes(t *testing.T) {
	t.Parallel()
	e := mustParse(t, "@every 1m")
	now := time.Now()
	if !e.Next(now, nil).IsZero() || !e.Prev(now, nil).IsZero() || e.Matches(now, nil) {
		t.Fatal("@every expression produced cron times")
	}
}

// bruteNext scans second by second.
func bruteNext(e *Expr, after time.Time, loc *time.Location, limit time.Duration) time.Time {
	t := after.Truncate(time.Second).Add(time.Second)
	for end := after.Add(limit); !t.After(end); t = t.Add(time.Second) {
		if e.Matches(t, loc) {
			return t
		}
	}
	return time.Time{}
}

func TestNextMatchesBruteForce(t *testing.T) {
	t.Parallel()
	specs := []string{"* * * * * *", "*/7 * * * * *", "13,47 */3 * * * *", "0 * 2-4 * * *", "5 0 0 * * *",
		"0 0 * 1,15 * *", "0 0 * * * sat,sun", "0 0 * 10 * 1"}
	start := utc("2026-02-27T22:58:31.25Z")
	for _, spec := range specs {
		e := mustParse(t, spec)
		after := start
		for range 25 {
			want := bruteNext(e, after, time.UTC, 40*24*time.Hour)
			got := e.Next(after, time.UTC)
			if !got.Equal(want) {
				t.Fatalf("%q: Next(%s) = %s, brute force %s", spec, after, got, want)
			}
			if p := e.Prev(got, time.UTC); !p.IsZero() && p.After(after) {
				t.Fatalf("%q: Prev(%s) = %s, after %s", spec, got, p, after)
			}
			after = got
		}
	}
}

// checkConsistent verifies the relations between Next, Prev and Matches at t.
func checkConsistent(t *testing.T, e *Expr, at time.Time, loc *time.Location) {
	t.Helper()
	n := e.Next(at, loc)
	if n.IsZero() {
		return
	}
	if !n.After(at) {
		t.Fatalf("%q in %v: Next(%s) = %s is not after it", e, loc, at, n)
	}
	if !e.Matches(n, loc) {
		t.Fatalf("%q in %v: Next(%s) = %s does not match", e, loc, at, n)
	}
	p := e.Prev(n, loc)
	if p.IsZero() {
		return
	}
	if !p.Before(n) || !e.Matches(p, loc) {
		t.Fatalf("%q in %v: Prev(%s) = %s", e, loc, n, p)
	}
	if p.After(at) {
		t.Fatalf("%q in %v: Prev(Next(%s)) = %s is after it, so Next skipped a match", e, loc, at, p)
	}
	if nn := e.Next(p, loc); !nn.Equal(n) {
		t.Fatalf("%q in %v: Next(Prev(%s)) = %s, want %s", e, loc, n, nn, n)
	}
}

func TestConsistencyAcrossZones(t *testing.T) {
	t.Parallel()
	locs := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+45*60), time.FixedZone("y", -9*3600-30*60)}
	specs := []string{"0 30 9 * * mon-fri", "0 0 0 29 2 *", "*/10 */10 */5 * * *", "0 0 0 L * *"}
	for _, spec := range specs {
		e, err := Parse(spec)
		if err != nil {
			continue // "L" is not supported; it must be rejected, not crash.
		}
		for _, loc := range locs {
			at := utc("2025-12-31T23:59:59.9Z")
			for range 50 {
				checkConsistent(t, e, at, loc)
				at = at.Add(37*time.Hour + 17*time.Minute + 3*time.Second)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"* * * * * *", "*/5 * * * *", "0 30 9 * * mon-fri", "@every 1s", "@hourly",
		"0 0 0 29 2 *", "1-5/2,7 0 0 * jan-mar ?", "@every 1h30m", "0 0 0 30 2 *", "@at x", "a b c d e f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		e, err := Parse(spec)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", spec, err)
			}
			return
		}
		// The normalised form parses to the same expression.
		e2, err := Parse(e.String())
		if err != nil {
			t.Fatalf("normalised %q of %q does not parse: %v", e.String(), spec, err)
		}
		if *e2 != *e {
			t.Fatalf("normalised %q of %q parses differently", e.String(), spec)
		}
		if _, ok := e.Every(); ok {
			return
		}
		checkConsistent(t, e, utc("2026-05-17T11:22:33.4Z"), time.UTC)
		checkConsistent(t, e, utc("2027-12-31T23:59:59Z"), time.FixedZone("x", 5*3600+45*60))
	})
}

func FuzzNextPrev(f *testing.F) {
	f.Add("0 30 9 * * mon-fri", int64(1780000000), int32(0))
	f.Add("*/7 */3 * * * *", int64(1790000000), int32(3600))
	f.Add("0 0 0 29 2 *", int64(1800000000), int32(-34200))
	f.Add("0 0 0 15 * mon", int64(1700000000), int32(20700))
	f.Fuzz(func(t *testing.T, spec string, unix int64, offset int32) {
		e, err := Parse(spec)
		if err != nil {
			return
		}
		if _, ok := e.Every(); ok {
			return
		}
		// Keep times and offsets in realistic ranges: zone offsets are whole
		// minutes (the server's minute truncation assumes it, as do all
		// current time zones).
		unix = 946684800 + (unix%(100*365*86400)+100*365*86400)%(100*365*86400)
		offset = offset % (14 * 3600) / 60 * 60
		checkConsistent(t, e, time.Unix(unix, 0), time.FixedZone("f", int(offset)))
	})
}

// TestConsistencyAcrossDST walks a year of daylight-saving transitions. (The
// server's algorithm, which Next reproduces, can skip a day in zones with a
// 30-minute shift such as Australia/Lord_Howe; those are not covered.)
func TestConsistencyAcrossDST(t *testing.T) {
	t.Parallel()
	for _, zone := range []string{"America/New_York", "Europe/Berlin", "America/Santiago"} {
		loc := mustLoc(t, zone)
		for _, spec := range []string{"0 30 2 * * *", "0 0 * * * *", "0 */15 1-3 * * *", "@daily"} {
			e := mustParse(t, spec)
			for at := utc("2026-01-01T00:00:00Z"); at.Year() < 2027; at = at.Add(5*time.Hour + 13*time.Minute + 13*time.Second) {
				checkConsistent(t, e, at, loc)
			}
		}
	}
}
