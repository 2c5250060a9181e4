// Package examples_test smoke-tests the runnable programs under examples/ and
// keeps the README's code sample in sync with them.
package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// build compiles the example in dir (relative to this package) into a
// temporary directory and returns the binary's path.
func build(t *testing.T, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the examples: %v", err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(dir))
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./"+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./%s: %v\n%s", dir, err, out)
	}
	return bin
}

// runQuickstart runs the binary with args and a generous deadline and
// returns its stdout, stderr and exit error (nil on status 0).
func runQuickstart(t *testing.T, bin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("quickstart %v did not exit within the deadline\nstdout:\n%s\nstderr:\n%s", args, &out, &errOut)
	}
	return out.String(), errOut.String(), err
}

func TestQuickstart(t *testing.T) {
	bin := build(t, "quickstart")

	t.Run("runs every task and exits 0", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, err := runQuickstart(t, bin, "-port", "-1")
		if err != nil {
			t.Fatalf("exit: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
		}
		for _, re := range []string{
			// 5 payments (one fails twice with 503, one is declined), 4 reports,
			// 11 e-mails; 2 tasks delayed.
			`(?m)^\s+payments\.charge\s+critical\s+4\s+2\s+1$`,
			`(?m)^\s+reports\.build\s+normal\s+4\s+0\s+0$`,
			`(?m)^\s+emails\.send\s+low\s+11\s+0\s+0$`,
			`(?m)^all 20 tasks finished in \S+: 19 done, 2 retries, 1 failed as planned$`,
			`(?m)retry\s+payments\.charge\s+critical\s+ord-1003\s+gateway: 503`,
			`(?m)start\s+payments\.charge\s+critical\s+ord-1003\s+attempt 3/5`,
			`(?m)FAILED\s+payments\.charge\s+critical\s+ord-1004\s+permanent: gateway: card declined`,
		} {
			if !regexp.MustCompile(re).MatchString(stdout) {
				t.Errorf("stdout does not match %s", re)
			}
		}
		// Delayed tasks report how long after their due time they started;
		// a negative value would mean a task ran early.
		delayed := regexp.MustCompile(`delayed; started (\S+) after its due time`).FindAllStringSubmatch(stdout, -1)
		if len(delayed) != 2 {
			t.Errorf("%d delayed starts reported, want 2", len(delayed))
		}
		for _, m := range delayed {
			if strings.HasPrefix(m[1], "-") {
				t.Errorf("a delayed task started %s after its due time: early", m[1])
			}
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
		}
	})

	t.Run("exits 1 when tasks miss the deadline", func(t *testing.T) {
		t.Parallel()
		// The delayed tasks are due after 2 s: a 1 s deadline cannot be met.
		stdout, stderr, err := runQuickstart(t, bin, "-port", "-1", "-timeout", "1s")
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("exit: %v, want status 1\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
		}
		if !regexp.MustCompile(`quickstart: timed out after 1s: \d+ of 20 tasks did not finish: .*reports\.build.*`).MatchString(stderr) {
			t.Errorf("stderr does not explain the timeout:\n%s", stderr)
		}
		if strings.Contains(stdout, "tasks finished") {
			t.Errorf("stdout claims success:\n%s", stdout)
		}
	})

	t.Run("runs against an existing server with -url", func(t *testing.T) {
		t.Parallel()
		srv := testutil.RunServer(t, testutil.WithListen())
		stdout, stderr, err := runQuickstart(t, bin, "-url", srv.ClientURL())
		if err != nil {
			t.Fatalf("exit: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
		}
		if !strings.Contains(stdout, "using the NATS server at "+srv.ClientURL()) ||
			!strings.Contains(stdout, "go run ./cmd/jetflow -s "+srv.ClientURL()+" dlq ls") {
			t.Errorf("stdout:\n%s", stdout)
		}
		_, js := testutil.JetStream(t, srv)
		st, err := js.Stream(t.Context(), "JETFLOW_DLQ")
		if err != nil {
			t.Fatal(err)
		}
		if si, err := st.Info(t.Context()); err != nil || si.State.Msgs != 1 {
			t.Fatalf("dead letters left on the server: %v %v", si, err)
		}
	})

	t.Run("serve keeps working until SIGINT", func(t *testing.T) {
		t.Parallel()
		if runtime.GOOS == "windows" {
			t.Skip("needs SIGINT")
		}
		testServe(t, bin)
	})
}

// testServe runs the quickstart with -serve, follows the printed nats CLI
// instructions with the Go client (a task published by hand runs), then
// stops it with SIGINT.
func testServe(t *testing.T, bin string) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-serve", "-port", "-1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var seen []string
	// await reads stdout until a line matches re.
	await := func(re *regexp.Regexp) []string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("quickstart exited before printing %s\nstdout:\n%s\nstderr:\n%s", re, strings.Join(seen, "\n"), &stderr)
				}
				seen = append(seen, l)
				if m := re.FindStringSubmatch(l); m != nil {
					return m
				}
			case <-ctx.Done():
				t.Fatalf("no line matching %s\nstdout:\n%s", re, strings.Join(seen, "\n"))
			}
		}
	}
	url := await(regexp.MustCompile(`^\s+nats -s (nats://127\.0\.0\.1:\d+) stream ls$`))[1]
	sched := await(regexp.MustCompile(`stream get JETFLOW_SCHEDULES --last-for (\S+)$`))[1]
	pub := await(regexp.MustCompile(`nats -s \S+ pub (\S+) '(.*)'$`))

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to the printed URL: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "JETFLOW_SCHEDULES")
	if err != nil {
		t.Fatalf("schedule stream: %v", err)
	}
	// The worker's delay mover stores the schedule a moment after the
	// enqueue.
	testutil.Wait(t, time.Minute, "the printed schedule subject "+sched+" to hold the schedule", func() bool {
		_, err := s.GetLastMsgForSubject(ctx, sched)
		return err == nil
	})
	if _, err := js.Publish(ctx, pub[1], []byte(pub[2])); err != nil {
		t.Fatalf("publish the printed task: %v", err)
	}
	await(regexp.MustCompile(`done\s+emails\.send\s+low\s+welcome you@example\.com`))

	// The acceptance flow, with the jetflow CLI as a separate
	// process, as the printed commands suggest.
	jf := build(t, "../cmd/jetflow")
	jetflow := func(v any, args ...string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, jf, append([]string{"-s", url}, args...)...).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("jetflow %v: %v\n%s", args, err, ee.Stderr)
			}
			t.Fatalf("jetflow %v: %v", args, err)
		}
		if v != nil {
			if err := json.Unmarshal(out, v); err != nil {
				t.Fatalf("jetflow %v: %v\n%s", args, err, out)
			}
		}
	}
	var status struct {
		Queues []struct {
			Type, Priority  string
			Scheduled, Dead int
			Consumer        string
		}
	}
	jetflow(&status, "status", "--json")
	queues := map[string]string{}
	for _, q := range status.Queues {
		queues[q.Type+"/"+q.Priority] = fmt.Sprintf("consumer=%t scheduled=%d dead=%d", q.Consumer != "", q.Scheduled, q.Dead)
	}
	for k, want := range map[string]string{
		"payments.charge/critical": "consumer=true scheduled=0 dead=1",
		"reports.build/normal":     "consumer=true scheduled=1 dead=0",
		"emails.send/low":          "consumer=true scheduled=0 dead=0",
	} {
		if queues[k] != want {
			t.Errorf("status: queue %s is %q, want %q", k, queues[k], want)
		}
	}
	var dlq struct {
		DeadLetters []struct {
			Seq  uint64
			Type string
		} `json:"dead_letters"`
	}
	jetflow(&dlq, "dlq", "ls", "--json")
	if len(dlq.DeadLetters) != 1 || dlq.DeadLetters[0].Type != "payments.charge" {
		t.Fatalf("dlq ls: %+v", dlq)
	}
	jetflow(nil, "dlq", "replay", fmt.Sprint(dlq.DeadLetters[0].Seq))
	await(regexp.MustCompile(`start\s+payments\.charge\s+critical\s+ord-1004`))
	var scheduled []struct {
		Type  string
		DueAt time.Time `json:"due_at"`
	}
	jetflow(&scheduled, "tasks", "ls", "--state", "scheduled", "--json")
	if len(scheduled) != 1 || scheduled[0].Type != "reports.build" || time.Until(scheduled[0].DueAt) < 50*time.Minute {
		t.Errorf("tasks ls --state scheduled: %+v", scheduled)
	}
	var crons []struct {
		Name     string
		NextFire time.Time `json:"next_fire"`
	}
	jetflow(&crons, "cron", "ls", "--json")
	if len(crons) != 1 || !crons[0].NextFire.After(time.Now()) {
		t.Errorf("cron ls: %+v", crons)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	await(regexp.MustCompile(`^stopping$`))
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGINT: %v\nstderr:\n%s", err, &stderr)
	}
}

// TestReadmeQuickstartInSync checks that the code sample in README.md is a
// verbatim excerpt of examples/quickstart/main.go, between the README:begin
// and README:end markers.
func TestReadmeQuickstartInSync(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("quickstart", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	sample := between(t, string(readme), "<!-- quickstart:begin -->\n```go\n", "```\n<!-- quickstart:end -->", "README.md")
	excerpt := between(t, string(src), "\t// README:begin\n", "\t// README:end\n", "quickstart/main.go")
	if sample != excerpt {
		t.Fatalf("the README sample differs from quickstart/main.go between its markers; copy the excerpt into README.md.\nREADME:\n%s\nmain.go:\n%s", sample, excerpt)
	}
	if !strings.Contains(string(src), sample) || len(strings.TrimSpace(sample)) == 0 {
		t.Fatal("README sample is empty or not in quickstart/main.go")
	}
}

func between(t *testing.T, s, begin, end, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(s, begin)
	if !ok {
		t.Fatalf("%s: marker %q not found", name, begin)
	}
	body, _, ok := strings.Cut(rest, end)
	if !ok {
		t.Fatalf("%s: marker %q not found after %q", name, end, begin)
	}
	if strings.Contains(body, begin) {
		t.Fatalf("%s: marker %q appears twice", name, begin)
	}
	return body
}

// TestReadmeLayoutCoversStreams checks that the README's layout table names
// every stream and subject that streams.Ensure creates.
func TestReadmeLayoutCoversStreams(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := streams.StreamConfigs(streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfgs {
		if !strings.Contains(string(readme), "`"+c.Name+"`") {
			t.Errorf("README does not mention stream %s", c.Name)
		}
		for _, subj := range c.Subjects {
			// "jetflow.task.>" is documented as "jetflow.task.<priority>.<type>".
			want := subj
			if strings.HasPrefix(subj, "jetflow.") {
				want = "`" + strings.TrimSuffix(subj, ">")
			}
			if !strings.Contains(string(readme), want) {
				t.Errorf("README does not document subject %s of %s (looked for %q)", subj, c.Name, want)
			}
		}
	}
}
