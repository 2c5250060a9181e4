// Command security runs jetflow over TLS in the documented secure
// deployment, on an embedded server:
//
//   - account JETFLOW holds JetStream and the streams, with one
//     least-privilege user per trusted role: admin creates the streams at
//     deploy time (streams.Ensure), worker consumes its task types and
//     nothing else, operator inspects and purges dead letters;
//   - account TENANT_A holds the producer, which has no JetStream API: it
//     imports the task intake subjects from JETFLOW as services, so the
//     server's answers to its publishes return into TENANT_A and can never
//     be stored by a stream (reply-subject injection).
//
// The server certificate is generated at start-up (self-signed, valid for an
// hour, for 127.0.0.1) and the passwords are random: nothing secret is
// committed. The configuration is rendered by package access and
// explained in docs/security.md.
//
// Run it with:
//
//	go run ./examples/security
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/access"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// taskType is the one task type of the example.
const taskType = "email.send"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "security:", err)
		os.Exit(1)
	}
}

// welcome is the payload of an email.send task.
type welcome struct {
	To string `json:"to"`
}

func run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	names := streams.MustNames("")

	cert, roots, err := selfSignedCert()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "jetflow-security-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	users, accounts, err := newUsers(names, taskType)
	if err != nil {
		return err
	}
	srv, err := startServer(dir, cert, accounts)
	if err != nil {
		return err
	}
	defer testutil.ShutdownServer(srv)
	fmt.Fprintln(out, "server: TLS with a certificate generated at start-up; account JETFLOW: admin, worker, operator; account TENANT_A: producer")

	connect := func(u user) (*conn, error) { return dial(srv.ClientURL(), roots, u) }

	// Deploy time: the admin creates the topology.
	admin, err := connect(users[access.RoleAdmin])
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := streams.Ensure(ctx, admin.js, streams.Config{}); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if err := framework.EnsureBuckets(ctx, admin.js); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	fmt.Fprintln(out, "admin: topology ensured")

	// The worker serves email.send.
	wc, err := connect(users[access.RoleWorker])
	if err != nil {
		return err
	}
	defer wc.Close()
	w, err := framework.NewWorker(wc.Conn)
	if err != nil {
		return err
	}
	sent := make(chan string, 1)
	framework.Handle(w, taskType, func(ctx context.Context, t *framework.Task, m welcome) error {
		sent <- m.To
		return nil
	})
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = w.Shutdown(sctx)
	}()
	fmt.Fprintln(out, "worker: serving", taskType)

	// The producer enqueues. It may not write the state bucket, nor read
	// the task partition count: its account has no JetStream, only the
	// task intake (one partition here; a partitioned deployment gives its
	// producers their count).
	pc, err := connect(users[access.RoleProducer])
	if err != nil {
		return err
	}
	defer pc.Close()
	cl, err := framework.NewClient(pc.Conn, framework.WithStateTracking(false), framework.WithPartitions(1))
	if err != nil {
		return err
	}
	info, err := cl.Enqueue(ctx, taskType, welcome{To: "ada@example.com"}, framework.WithID("welcome-ada"))
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	fmt.Fprintln(out, "producer: enqueued", info.Type, info.ID)
	select {
	case to := <-sent:
		fmt.Fprintln(out, "worker: sent welcome e-mail to", to)
	case <-ctx.Done():
		return fmt.Errorf("worker: task not handled: %w", ctx.Err())
	}

	// What each role may not do.
	tasks := names.TaskStream()
	report := func(who, what string, err error) error {
		if !errors.Is(err, nats.ErrPermissionViolation) {
			return fmt.Errorf("%s: %s was not denied: %v", who, what, err)
		}
		fmt.Fprintf(out, "%s: %s denied (permissions violation)\n", who, what)
		return nil
	}
	if err := report("producer", "purge "+tasks, pc.denied(ctx, func(ctx context.Context) error {
		s, err := pc.js.Stream(ctx, tasks)
		if err != nil {
			return err
		}
		return s.Purge(ctx)
	})); err != nil {
		return err
	}
	if err := report("producer", "consume "+taskType, pc.denied(ctx, func(ctx context.Context) error {
		_, err := pc.js.CreateOrUpdateConsumer(ctx, tasks, jetstream.ConsumerConfig{Durable: "steal", FilterSubject: names.TaskWildcard()})
		return err
	})); err != nil {
		return err
	}
	if err := report("worker", "enqueue", wc.denied(ctx, func(ctx context.Context) error {
		c, err := framework.NewClient(wc.Conn)
		if err != nil {
			return err
		}
		_, err = c.Enqueue(ctx, taskType, welcome{To: "eve@example.com"})
		return err
	})); err != nil {
		return err
	}

	// The operator looks after dead letters.
	oc, err := connect(users[access.RoleOperator])
	if err != nil {
		return err
	}
	defer oc.Close()
	dlq, err := oc.js.Stream(ctx, names.DLQStream())
	if err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	if err := dlq.Purge(ctx); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	fmt.Fprintln(out, "operator: purged", names.DLQStream())
	return nil
}

// startServer runs an embedded JetStream server on loopback with TLS and
// the accounts.
func startServer(dir string, cert tls.Certificate, accounts string) (*server.Server, error) {
	o, err := serverOptions(dir, accounts)
	if err != nil {
		return nil, err
	}
	o.NoLog, o.NoSigs = true, true
	o.TLS, o.TLSTimeout = true, 5
	o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return testutil.StartServer(o)
}

// conn is a user's TLS connection with its JetStream context and the
// permission violations the server reported on it.
type conn struct {
	*nats.Conn
	js         jetstream.JetStream
	violations chan error
}

func dial(url string, roots *x509.CertPool, u user) (*conn, error) {
	c := &conn{violations: make(chan error, 16)}
	nc, err := nats.Connect(url,
		nats.UserInfo(u.name, u.password),
		nats.Secure(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
		nats.CustomInboxPrefix(u.inbox),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				select {
				case c.violations <- err:
				default:
				}
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", u.name, err)
	}
	if !nc.TLSRequired() {
		nc.Close()
		return nil, fmt.Errorf("%s: connection is not TLS", u.name)
	}
	c.Conn = nc
	if c.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// denied runs op, which the server should refuse, and returns the
// permission violation the server reported. A denied publish is dropped by
// the server, so op itself would only time out: the violation arrives on the
// connection's error handler, and op is cancelled then.
func (c *conn) denied(ctx context.Context, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for drained := false; !drained; {
		select {
		case <-c.violations: // reported before op ran
		default:
			drained = true
		}
	}
	opDone := make(chan error, 1)
	go func() { opDone <- op(ctx) }()
	var opErr error
	select {
	case v := <-c.violations:
		cancel()
		<-opDone
		return v
	case opErr = <-opDone:
	}
	select {
	case v := <-c.violations:
		return v
	case <-ctx.Done():
		return fmt.Errorf("no permissions violation reported (operation returned %v)", opErr)
	}
}

// selfSignedCert returns a certificate for 127.0.0.1 and localhost, valid
// for an hour, signed by its own key, and a pool holding it as the root.
func selfSignedCert() (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "jetflow example"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots, nil
}
