package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jetflow-io/jetflow/access"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// operatorCommands are the read commands an operator runs first; each must
// work with the operator role of docs/security.md and nothing more.
var operatorCommands = [][]string{
	{"status"}, {"dlq", "ls"}, {"cron", "ls"}, {"breakers"}, {"workflows", "ls"}, {"tasks", "ls"},
}

// TestOperatorRoleRunsTheCommands runs the operator's commands with
// --user/--password against the documented deployment (accounts layout,
// testutil.RunSecured): a producer's task dead-lettered by a worker and a
// repeating schedule registered by the operator give every command
// something to read. No command may fail or meet a permission violation.
func TestOperatorRoleRunsTheCommands(t *testing.T) {
	t.Parallel()
	sec := testutil.RunSecured(t, testutil.SecuredConfig{Types: []string{"reports.build"}})
	adminJS, err := jetstream.New(sec.Connect(t, testutil.SecuredAdmin))
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.EnsureBuckets(t.Context(), adminJS); err != nil {
		t.Fatal(err)
	}

	ran := make(chan struct{}, 1)
	w, err := framework.NewWorker(sec.Connect(t, testutil.SecuredWorker))
	if err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("reports.build", func(ctx context.Context, tk *framework.Task) error {
		ran <- struct{}{}
		return framework.Permanent(errors.New("no such report"))
	})
	testutil.StartWorker(t, w)
	producer, err := framework.NewClient(sec.Connect(t, testutil.SecuredProducer), framework.WithStateTracking(false), framework.WithPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Enqueue(t.Context(), "reports.build", map[string]string{"name": "sales"}); err != nil {
		t.Fatal(err)
	}
	testutil.Recv(t, ran, waitLong, "the task")
	opClient, err := framework.NewClient(sec.Connect(t, testutil.SecuredOperator))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schedule.New(opClient).Register(t.Context(), schedule.Definition{Name: "nightly", Spec: "0 0 2 * * *", Type: "reports.build"}); err != nil {
		t.Fatal(err)
	}

	op := sec.User(testutil.SecuredOperator)
	login := []string{"-s", sec.URL(), "--user", op.Name, "--password", op.Password, "--inbox-prefix", op.InboxPrefix}
	testutil.Wait(t, waitLong, "the dead letter listed", func() bool {
		r := runCLI(t, append(login, "dlq", "ls")...)
		return r.code == exitOK && strings.Contains(r.stdout, "no such report")
	})
	for _, cmd := range operatorCommands {
		r := runCLI(t, append(login, cmd...)...)
		if r.code != exitOK || strings.Contains(r.stderr, "ermission") {
			t.Errorf("jetflow %s as the operator: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(cmd, " "), r.code, r.stdout, r.stderr)
		}
	}
	if r := runCLI(t, append(login, "cron", "ls")...); !strings.Contains(r.stdout, "nightly") {
		t.Errorf("cron ls does not list the schedule:\n%s", r.stdout)
	}
}

// TestOperatorRoleWithCreds runs the operator's commands with --creds on a
// server in operator (JWT) mode: the operator's permissions, rendered by
// package access, go into its user JWT unchanged.
func TestOperatorRoleWithCreds(t *testing.T) {
	t.Parallel()
	names, err := streams.NewNames("")
	if err != nil {
		t.Fatal(err)
	}
	perms, err := access.Operator(names, access.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, creds := jwtServer(t, map[string]access.Permissions{
		"admin":    {Publish: []string{">"}, Subscribe: []string{">"}},
		"operator": perms,
	})
	nc := testutil.Connect(t, srv, nats.UserCredentials(creds["admin"]))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.EnsureBuckets(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	login := []string{"-s", srv.ClientURL(), "--creds", creds["operator"], "--inbox-prefix", "_INBOX_operator"}
	for _, cmd := range operatorCommands {
		r := runCLI(t, append(login, cmd...)...)
		if r.code != exitOK || strings.Contains(r.stderr, "ermission") {
			t.Errorf("jetflow %s with --creds: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(cmd, " "), r.code, r.stdout, r.stderr)
		}
	}
}

// jwtServer starts a listening server in operator mode with one account
// that has JetStream, and one user per entry of users with those
// permissions. It returns the server and each user's credentials file.
func jwtServer(t *testing.T, users map[string]access.Permissions) (*testutil.Server, map[string]string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, err := okp.PublicKey()
	must(err)
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "jetflow-test"
	ojwt, err := oc.Encode(okp)
	must(err)
	oc, err = jwt.DecodeOperatorClaims(ojwt)
	must(err)

	resolver := &server.MemAccResolver{}
	account := func(name string, js bool) (nkeys.KeyPair, string) {
		akp, err := nkeys.CreateAccount()
		must(err)
		apub, err := akp.PublicKey()
		must(err)
		ac := jwt.NewAccountClaims(apub)
		ac.Name = name
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		ajwt, err := ac.Encode(okp)
		must(err)
		must(resolver.Store(apub, ajwt))
		return akp, apub
	}
	_, sysPub := account("SYS", false)
	akp, _ := account("JETFLOW", true)

	dir := t.TempDir()
	creds := make(map[string]string)
	for name, p := range users {
		ukp, err := nkeys.CreateUser()
		must(err)
		upub, err := ukp.PublicKey()
		must(err)
		uc := jwt.NewUserClaims(upub)
		uc.Name = name
		uc.Pub.Allow.Add(p.Publish...)
		uc.Sub.Allow.Add(p.Subscribe...)
		ujwt, err := uc.Encode(akp)
		must(err)
		seed, err := ukp.Seed()
		must(err)
		file, err := jwt.FormatUserConfig(ujwt, seed)
		must(err)
		path := filepath.Join(dir, name+".creds")
		must(os.WriteFile(path, file, 0o600))
		creds[name] = path
	}
	srv := testutil.RunServer(t, testutil.WithListen(), func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{oc}
		o.AccountResolver = resolver
		o.SystemAccount = sysPub
	})
	// The account's JetStream is enabled once the server has looked it up.
	testutil.Wait(t, 20*time.Second, "JetStream in the account", func() bool {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserCredentials(creds["admin"]))
		if err != nil {
			return false
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return false
		}
		_, err = js.AccountInfo(t.Context())
		return err == nil
	})
	return srv, creds
}
