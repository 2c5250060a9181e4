package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/access"
	"github.com/jetflow-io/jetflow/streams"
)

// Roles of a [Secured] server, the names [Secured.User] and
// [Secured.Connect] take.
const (
	SecuredAdmin     = access.RoleAdmin
	SecuredProducer  = access.RoleProducer // tenant A
	SecuredProducerB = "producer-b"        // tenant B
	SecuredWorker    = access.RoleWorker
	SecuredOperator  = access.RoleOperator
)

// Accounts of a [Secured] server in the accounts layout. In the
// single-account layout every user is in SecuredAccount.
const (
	SecuredAccount = "JETFLOW"
	SecuredTenantA = "TENANT_A"
	SecuredTenantB = "TENANT_B"
)

// securedPassword is the number of random bytes of each password.
const securedPassword = 16

// SecuredConfig is the deployment [RunSecured] starts.
type SecuredConfig struct {
	// Types are the task types the worker user serves. Default none.
	Types []string
	// Dependencies are the circuit-breaker dependencies the worker user
	// reports on. Default none.
	Dependencies []string
	// WorkerFeatures are what the worker user runs. Default (zero)
	// access.DefaultFeatures.
	WorkerFeatures access.Feature
	// ProducerBTypes are the task types (or patterns, "tenant_b.>") the
	// producer of tenant B may enqueue, imported by its account. Default
	// every type. The producer of tenant A may enqueue every type.
	ProducerBTypes []string
	// SingleAccount puts every user in one account with JetStream, with
	// subject permissions only: the layout docs/security.md documents as
	// not stopping reply-subject injection. Its producers also get what
	// they had there: the state bucket and STREAM.INFO of the task and
	// delay streams. Default false: the accounts layout.
	SingleAccount bool
	// Streams is the topology the admin ensures. Default streams.Config{}.
	// Its Partitions is the task partition count every user's permissions
	// and the accounts are rendered for (access.Options.Partitions,
	// access.Accounts.Partitions).
	Streams streams.Config
	// ProducerPartitions, when set, is the task partition count the two
	// producers' permissions are rendered for instead of
	// Streams.Partitions: fewer, to test a producer granted fewer
	// partitions than the deployment has. Their accounts import every
	// partition's subjects either way. Default 0: Streams.Partitions.
	ProducerPartitions int
}

// SecuredUser is a user of a [Secured] server.
type SecuredUser struct {
	// Name and Password are its credentials (nats.UserInfo).
	Name, Password string
	// InboxPrefix is its inbox prefix (nats.CustomInboxPrefix): it may
	// subscribe to InboxPrefix+".>" only.
	InboxPrefix string
	// Account is the NATS account it belongs to.
	Account string
}

// Secured is an embedded nats-server configured as docs/security.md
// documents: the jetflow account with JetStream, the admin, worker and
// operator users, and two tenant accounts of producers importing the task
// intake subjects as services ([access.Accounts]), all of them for the
// deployment's task partitions. Build it with
// [RunSecured]. Its methods are safe for concurrent use.
type Secured struct {
	// Server is the running server.
	Server *Server
	// Config is the server's configuration file, as rendered.
	Config string
	users  map[string]SecuredUser
}

// RunSecured starts an embedded server listening on 127.0.0.1 on a random
// port, with the configuration cfg renders, its store under tb.TempDir
// and shutdown registered with tb.Cleanup; then it ensures the topology
// (streams.Ensure, which also creates every KV bucket with its defaults)
// as the admin. Passwords are random. TLS is not required.
//
// testutil does not import framework (whose own tests import testutil):
// a test that wants framework.EnsureBuckets's settings runs it as the
// admin.
func RunSecured(tb TB, cfg SecuredConfig) *Secured {
	tb.Helper()
	s, err := newSecured(tb.TempDir(), cfg)
	if err != nil {
		tb.Fatalf("testutil: secured server: %v", err)
	}
	srv, err := StartServer(s.Server.Opts)
	if err != nil {
		tb.Fatalf("testutil: start secured nats-server: %v", err)
	}
	tb.Cleanup(func() { ShutdownServer(srv) })
	s.Server.Server = srv
	nc := s.Connect(tb, SecuredAdmin)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("testutil: jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	if _, err := streams.Ensure(ctx, js, cfg.Streams); err != nil {
		tb.Fatalf("testutil: ensure topology as admin: %v", err)
	}
	nc.Close()
	return s
}

// newSecured renders the users and the configuration of cfg, with the
// store under dir, and parses it into the server's options.
func newSecured(dir string, cfg SecuredConfig) (*Secured, error) {
	names, err := streams.NewNames(cfg.Streams.Prefix)
	if err != nil {
		return nil, err
	}
	s := &Secured{users: make(map[string]SecuredUser)}
	user := func(role, account string, perms func(streams.Names, access.Options) (access.Permissions, error), o access.Options) (access.User, error) {
		b := make([]byte, securedPassword)
		if _, err := rand.Read(b); err != nil {
			return access.User{}, err
		}
		o.InboxPrefix = "_INBOX_" + strings.ReplaceAll(role, "-", "_")
		p, err := perms(names, o)
		if err != nil {
			return access.User{}, err
		}
		u := SecuredUser{Name: role, Password: hex.EncodeToString(b), InboxPrefix: o.InboxPrefix, Account: account}
		s.users[role] = u
		return access.User{Name: u.Name, Password: u.Password, Permissions: p}, nil
	}
	tenantA, tenantB := SecuredTenantA, SecuredTenantB
	if cfg.SingleAccount {
		tenantA, tenantB = SecuredAccount, SecuredAccount
	}
	var own []access.User
	for _, r := range []struct {
		role  string
		perms func(streams.Names, access.Options) (access.Permissions, error)
	}{{SecuredAdmin, access.Admin}, {SecuredWorker, access.Worker}, {SecuredOperator, access.Operator}} {
		u, err := user(r.role, SecuredAccount, r.perms, access.Options{Types: cfg.Types, Dependencies: cfg.Dependencies,
			Features: cfg.WorkerFeatures, Partitions: cfg.Streams.Partitions})
		if err != nil {
			return nil, err
		}
		own = append(own, u)
	}
	producerParts := cfg.ProducerPartitions
	if producerParts == 0 {
		producerParts = cfg.Streams.Partitions
	}
	pa, err := user(SecuredProducer, tenantA, access.Producer, access.Options{Partitions: producerParts})
	if err != nil {
		return nil, err
	}
	pb, err := user(SecuredProducerB, tenantB, access.Producer, access.Options{Types: cfg.ProducerBTypes, Partitions: producerParts})
	if err != nil {
		return nil, err
	}
	var block string
	if cfg.SingleAccount {
		for _, p := range []*access.User{&pa, &pb} {
			p.Permissions.Publish = append(p.Permissions.Publish,
				"$KV."+names.StateBucket()+".>",
				"$JS.API.STREAM.INFO."+names.TaskStream(),
				"$JS.API.STREAM.INFO."+names.DelayStream())
		}
		block, err = access.Accounts{Account: SecuredAccount, Partitions: cfg.Streams.Partitions, Users: append(own, pa, pb)}.Render(names)
	} else {
		block, err = access.Accounts{Account: SecuredAccount, Partitions: cfg.Streams.Partitions, Users: own, Tenants: []access.Tenant{
			{Account: SecuredTenantA, Users: []access.User{pa}},
			{Account: SecuredTenantB, Types: cfg.ProducerBTypes, Users: []access.User{pb}},
		}}.Render(names)
	}
	if err != nil {
		return nil, err
	}
	store := filepath.Join(dir, "jetstream")
	s.Config = fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream {\n  store_dir: %q\n  max_memory_store: 256MB\n  max_file_store: 1GB\n}\n%s", store, block)
	file := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(file, []byte(s.Config), 0o600); err != nil {
		return nil, err
	}
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		return nil, fmt.Errorf("parse configuration: %w", err)
	}
	o.NoLog, o.NoSigs = true, true
	s.Server = &Server{Opts: o}
	return s, nil
}

// URL returns the server's client URL ("nats://127.0.0.1:<port>").
func (s *Secured) URL() string { return s.Server.ClientURL() }

// User returns the user of role (SecuredAdmin, SecuredProducer,
// SecuredProducerB, SecuredWorker or SecuredOperator). An unknown role
// returns the zero SecuredUser.
func (s *Secured) User(role string) SecuredUser { return s.users[role] }

// Connect opens a connection as role's user, with its inbox prefix and
// jetflow's reconnect defaults, opts appended, and closes it when the test
// ends. An unknown role fails the test.
func (s *Secured) Connect(tb TB, role string, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	u, ok := s.users[role]
	if !ok {
		tb.Fatalf("testutil: secured server has no role %q", role)
	}
	base := []nats.Option{
		nats.UserInfo(u.Name, u.Password), nats.CustomInboxPrefix(u.InboxPrefix),
		nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond),
	}
	nc, err := nats.Connect(s.URL(), append(base, opts...)...)
	if err != nil {
		tb.Fatalf("testutil: connect as %s: %v", role, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}
