package access

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/streams"
)

// TestKeyTokenMatchesStateKeys: effect keys start with the task type
// escaped like state keys; the worker's grant must name the same token.
func TestKeyTokenMatchesStateKeys(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"email.send", "a", "payments_v2.charge-eu", "x.y.z"} {
		if got, want := keyToken(typ), staterec.Key(typ); got != want {
			t.Errorf("keyToken(%q) = %q, staterec.Key = %q", typ, got, want)
		}
	}
}

func TestWorkerScopesItsTypesAndDependencies(t *testing.T) {
	t.Parallel()
	n := streams.MustNames("")
	p, err := Worker(n, Options{Types: []string{"email.send"}, Dependencies: []string{"mail.smtp"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"$JS.API.CONSUMER.CREATE.JETFLOW_TASKS.email_send-normal.jetflow.task.normal.email.send",
		"$KV.JETFLOW_EFFECTS.email=2Esend.>",
		"$KV.JETFLOW_BREAKERS.mail.smtp",
		"$JS.API.CONSUMER.MSG.NEXT.JETFLOW_DELAYS.mover",
	} {
		if !slices.Contains(p.Publish, want) {
			t.Errorf("worker may not publish %s", want)
		}
	}
	for _, never := range []string{
		"$KV.JETFLOW_EFFECTS.>", "$KV.JETFLOW_BREAKERS.>", "$JS.API.CONSUMER.CREATE.JETFLOW_DELAYS.mover",
		"jetflow.task.>", "$JS.API.>",
	} {
		if slices.Contains(p.Publish, never) {
			t.Errorf("worker may publish %s", never)
		}
	}
	if want := []string{"_INBOX_worker.>"}; !slices.Equal(p.Subscribe, want) {
		t.Errorf("worker subscribes to %v, want %v", p.Subscribe, want)
	}
	if !slices.Contains(p.Publish, "$KV.JETFLOW_WORKERS.>") {
		t.Error("a worker without an ID may not write the worker registry")
	}
	own, err := Worker(n, Options{Types: []string{"email.send"}, WorkerID: "mail-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(own.Publish, "$KV.JETFLOW_WORKERS.mail-1") || slices.Contains(own.Publish, "$KV.JETFLOW_WORKERS.>") {
		t.Error("a worker with an ID may write others' registry records")
	}
	if _, err := Worker(n, Options{WorkerID: "a.b"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("worker ID with a dot: %v, want ErrInvalid", err)
	}
	lane, err := Worker(n, Options{Types: []string{"email.send"}, Features: DeadLetters | Effects})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(lane.Publish, "jetflow.dlq.email.send") || slices.Contains(lane.Publish, "jetflow.dlq.>") {
		t.Error("a worker without router and mover may dead-letter other types")
	}
	less, err := Worker(n, Options{Types: []string{"email.send"}, Features: StateTracking})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(less.Publish, n.DLQSubject(">")) || slices.Contains(less.Publish, "$JS.API.STREAM.MSG.DELETE.JETFLOW_TASKS") {
		t.Error("a worker without dead letters may still write them")
	}
}

func TestProducerIntake(t *testing.T) {
	t.Parallel()
	n := streams.MustNames("")
	all, err := Producer(n, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"jetflow.task.>", "jetflow.ord.>", "jetflow.delay.>"}; !slices.Equal(all.Publish, want) {
		t.Errorf("producer publishes %v, want %v", all.Publish, want)
	}
	some, err := Producer(n, Options{Types: []string{"tenant_a.>", "billing.charge"}, InboxPrefix: "_INBOX_a"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"jetflow.task.*.tenant_a.>", "jetflow.ord.tenant_a.>", "jetflow.task.*.billing.charge", "jetflow.ord.billing.charge.*", "jetflow.delay.>"}
	if !slices.Equal(some.Publish, want) || !slices.Equal(some.Subscribe, []string{"_INBOX_a.>"}) {
		t.Errorf("producer of some types: %+v, want publish %v", some, want)
	}
	for _, bad := range []Options{{Types: []string{"Upper.case"}}, {Types: []string{">.x"}}, {Types: []string{"a..b"}}, {InboxPrefix: "_INBOX.*"}} {
		if _, err := Producer(n, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Producer(%+v): %v, want ErrInvalid", bad, err)
		}
	}
}

// TestConfigParses: the rendered block is a configuration nats-server
// reads, with the users in their accounts.
func TestConfigParses(t *testing.T) {
	t.Parallel()
	n := streams.MustNames("")
	admin, _ := Admin(n, Options{})
	prod, _ := Producer(n, Options{Types: []string{"tenant_a.>"}})
	block, err := Config(n, "JETFLOW", []User{{Name: "admin", Password: "s3cret", Permissions: admin}},
		Tenant{Account: "TENANT_A", Types: []string{"tenant_a.>"}, Users: []User{{Name: "producer", Password: "pw", Permissions: prod}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "server.conf")
	if err := os.WriteFile(file, []byte("jetstream {store_dir: \""+t.TempDir()+"\"}\n"+block), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("%v\n%s", err, block)
	}
	accounts := map[string]string{}
	for _, u := range o.Users {
		accounts[u.Username] = u.Account.Name
		if u.Username == "admin" && !slices.Equal(u.Permissions.Publish.Allow, []string{"$JS.API.>"}) {
			t.Errorf("admin publishes %v", u.Permissions.Publish.Allow)
		}
	}
	if accounts["admin"] != "JETFLOW" || accounts["producer"] != "TENANT_A" {
		t.Errorf("accounts of the users: %v\n%s", accounts, block)
	}
	for _, bad := range []struct {
		account string
		users   []User
		tenants []Tenant
	}{
		{"JET.FLOW", nil, nil},
		{"JETFLOW", []User{{Name: "a", Password: `x"y`}}, nil},
		{"JETFLOW", []User{{Name: "a", Password: "$VAR"}}, nil},
		{"JETFLOW", nil, []Tenant{{Account: "JETFLOW"}}},
		{"JETFLOW", nil, []Tenant{{Account: "T", Types: []string{"Bad"}}}},
	} {
		if _, err := Config(n, bad.account, bad.users, bad.tenants...); !errors.Is(err, ErrInvalid) {
			t.Errorf("Config(%q, %v, %v): %v, want ErrInvalid", bad.account, bad.users, bad.tenants, err)
		}
	}
}
