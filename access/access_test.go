package access

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	want := []string{"jetflow.task.*.tenant_a.>", "jetflow.ord.tenant_a.>", "jetflow.task.*.billing.charge", "jetflow.ord.billing.charge.K.*.*.*.*.*.*.*.*", "jetflow.delay.>"}
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

// TestPartitionGrants: with Partitions, each role gets its grants on the
// task stream in every partition's stream, and its task subjects in every
// partition, and nothing on a partition beyond the count; 0 and 1 grant
// the same as one partition always did.
func TestPartitionGrants(t *testing.T) {
	t.Parallel()
	n := streams.MustNames("")
	for _, r := range []struct {
		role  string
		perms func(streams.Names, Options) (Permissions, error)
	}{{RoleProducer, Producer}, {RoleWorker, Worker}, {RoleOperator, Operator}, {RoleAdmin, Admin}} {
		o := Options{Types: []string{"email.send"}}
		zero, err := r.perms(n, o)
		if err != nil {
			t.Fatal(err)
		}
		o.Partitions = 1
		one, err := r.perms(n, o)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(zero.Publish, one.Publish) {
			t.Errorf("%s: Partitions 1 grants %v, 0 grants %v", r.role, one.Publish, zero.Publish)
		}
		for _, bad := range []int{-1, streams.MaxPartitions + 1} {
			if _, err := r.perms(n, Options{Partitions: bad}); r.role != RoleAdmin && !errors.Is(err, ErrInvalid) {
				t.Errorf("%s with %d partitions: %v, want ErrInvalid", r.role, bad, err)
			}
		}
	}

	w, err := Worker(n, Options{Types: []string{"email.send"}, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"$JS.API.STREAM.INFO.JETFLOW_TASKS", "$JS.API.STREAM.INFO.JETFLOW_TASKS_P2",
		"$JS.API.CONSUMER.CREATE.JETFLOW_TASKS.email_send-high.jetflow.task.high.email.send",
		"$JS.API.CONSUMER.CREATE.JETFLOW_TASKS_P1.email_send-high.jetflow.p1.task.high.email.send",
		"$JS.API.CONSUMER.INFO.JETFLOW_TASKS_P2.email_send-low",
		"$JS.API.CONSUMER.MSG.NEXT.JETFLOW_TASKS_P2.email_send-low",
		"$JS.API.CONSUMER.PAUSE.JETFLOW_TASKS_P1.email_send-critical",
		"$JS.ACK.JETFLOW_TASKS_P2.email_send-normal.>",
		"$JS.API.DIRECT.GET.JETFLOW_TASKS_P1", "$JS.API.STREAM.MSG.DELETE.JETFLOW_TASKS_P2",
		"$JS.API.CONSUMER.LIST.JETFLOW_TASKS_P1", "$JS.API.CONSUMER.INFO.JETFLOW_TASKS_P2.*",
	} {
		if !slices.Contains(w.Publish, want) {
			t.Errorf("worker of 3 partitions may not publish %s", want)
		}
	}
	for _, s := range w.Publish {
		if strings.Contains(s, "_P3") || strings.Contains(s, ".p3.") {
			t.Errorf("worker of 3 partitions may publish %s", s)
		}
		if strings.Contains(s, "CONSUMER.CREATE.JETFLOW_TASKS_P1.") && !strings.Contains(s, ".jetflow.p1.task.") {
			t.Errorf("worker may create a consumer of partition 1 on another partition's subjects: %s", s)
		}
	}
	if got, want := len(w.Publish), len(mustWorker(t, n, 1).Publish)+2*(4*5+4+1); got != want {
		t.Errorf("worker of 3 partitions has %d grants, want %d (one partition's and, per more partition, 20 consumer lines, 4 router lines, 1 stream info)", got, want)
	}

	p, err := Producer(n, Options{Types: []string{"billing.charge", "tenant_a.>"}, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"jetflow.task.*.billing.charge", "jetflow.ord.billing.charge.K.*.*.*.*.*.*.*.*", "jetflow.task.*.tenant_a.>", "jetflow.ord.tenant_a.>",
		"jetflow.p1.task.*.billing.charge", "jetflow.p1.ord.billing.charge.K.*.*.*.*.*.*.*.*", "jetflow.p1.task.*.tenant_a.>", "jetflow.p1.ord.tenant_a.>",
		"jetflow.p2.task.*.billing.charge", "jetflow.p2.ord.billing.charge.K.*.*.*.*.*.*.*.*", "jetflow.p2.task.*.tenant_a.>", "jetflow.p2.ord.tenant_a.>",
		"jetflow.delay.>",
	}
	if !slices.Equal(p.Publish, want) {
		t.Errorf("producer of 3 partitions publishes %v, want %v", p.Publish, want)
	}
	all, err := PartitionedIntake(n, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"jetflow.task.>", "jetflow.ord.>", "jetflow.p1.task.>", "jetflow.p1.ord.>", "jetflow.delay.>"}; !slices.Equal(all, want) {
		t.Errorf("intake of 2 partitions %v, want %v", all, want)
	}

	op, err := Operator(n, Options{Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"jetflow.task.>", "jetflow.p1.task.>", "$JS.API.DIRECT.GET.JETFLOW_TASKS_P1", "$JS.API.DIRECT.GET.JETFLOW_TASKS_P1.>"} {
		if !slices.Contains(op.Publish, want) {
			t.Errorf("operator of 2 partitions may not publish %s", want)
		}
	}
	if slices.Contains(op.Publish, "jetflow.p2.task.>") || slices.Contains(op.Publish, "jetflow.p1.ord.>") {
		t.Errorf("operator of 2 partitions publishes %v", op.Publish)
	}
}

func mustWorker(t *testing.T, n streams.Names, partitions int) Permissions {
	t.Helper()
	p, err := Worker(n, Options{Types: []string{"email.send"}, Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAccountsPartitions: the jetflow account exports, and each tenant
// imports, the intake of every partition; Config is the layout of one.
func TestAccountsPartitions(t *testing.T) {
	t.Parallel()
	n := streams.MustNames("")
	prod, _ := Producer(n, Options{Types: []string{"tenant_a.>"}, Partitions: 2})
	users := []User{{Name: "producer", Password: "pw", Permissions: prod}}
	block, err := Accounts{Account: "JETFLOW", Partitions: 2, Tenants: []Tenant{{Account: "TENANT_A", Types: []string{"tenant_a.>"}, Users: users}}}.Render(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`{ service: "jetflow.p1.task.>", accounts: ["TENANT_A"] }`,
		`{ service: "jetflow.p1.ord.>", accounts: ["TENANT_A"] }`,
		`{ service: { account: "JETFLOW", subject: "jetflow.p1.task.*.tenant_a.>" } }`,
		`{ service: { account: "JETFLOW", subject: "jetflow.p1.ord.tenant_a.>" } }`,
	} {
		if !strings.Contains(block, want) {
			t.Errorf("layout of 2 partitions lacks %s\n%s", want, block)
		}
	}
	if strings.Contains(block, ".p2.") {
		t.Errorf("layout of 2 partitions names partition 2\n%s", block)
	}
	file := filepath.Join(t.TempDir(), "server.conf")
	if err := os.WriteFile(file, []byte("jetstream {store_dir: \""+t.TempDir()+"\"}\n"+block), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := server.ProcessConfigFile(file); err != nil {
		t.Fatalf("%v\n%s", err, block)
	}
	one, err := Config(n, "JETFLOW", nil, Tenant{Account: "TENANT_A", Types: []string{"tenant_a.>"}, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	same, err := Accounts{Account: "JETFLOW", Partitions: 1, Tenants: []Tenant{{Account: "TENANT_A", Types: []string{"tenant_a.>"}, Users: users}}}.Render(n)
	if err != nil || one != same {
		t.Errorf("Config is not the layout of one partition (%v):\n%s\n%s", err, one, same)
	}
	if _, err := (Accounts{Account: "JETFLOW", Partitions: streams.MaxPartitions + 1}).Render(n); !errors.Is(err, ErrInvalid) {
		t.Errorf("accounts of %d partitions: %v, want ErrInvalid", streams.MaxPartitions+1, err)
	}
}
