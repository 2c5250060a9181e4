package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/streams"
)

// defaultURL is used without -s, NATS_URL or a context.
const defaultURL = "nats://127.0.0.1:4222"

// connFlags are the connection flags, shaped like the nats CLI's.
type connFlags struct {
	server, context           string
	creds, nkey               string
	user, password, token     string
	tlsCert, tlsKey, tlsCA    string
	tlsFirst                  bool
	prefix                    string
	inboxPrefix               string
	timeout                   time.Duration
	resolvedURL, resolvedFrom string // after connect: the URL and where it came from
}

// register adds the connection flags to fs, keeping values already parsed
// (flags before the command) as defaults.
func (f *connFlags) register(fs *flag.FlagSet) {
	if f.timeout == 0 {
		f.timeout = 10 * time.Second
	}
	fs.StringVar(&f.server, "s", f.server, "NATS server URLs, comma separated")
	fs.StringVar(&f.server, "server", f.server, "NATS server URLs, comma separated")
	fs.StringVar(&f.context, "context", f.context, "nats CLI context name")
	fs.StringVar(&f.creds, "creds", f.creds, "user credentials file")
	fs.StringVar(&f.nkey, "nkey", f.nkey, "NKey seed file")
	fs.StringVar(&f.user, "user", f.user, "user name")
	fs.StringVar(&f.password, "password", f.password, "password")
	fs.StringVar(&f.token, "token", f.token, "authentication token")
	fs.StringVar(&f.tlsCert, "tlscert", f.tlsCert, "TLS client certificate file")
	fs.StringVar(&f.tlsKey, "tlskey", f.tlsKey, "TLS client key file")
	fs.StringVar(&f.tlsCA, "tlsca", f.tlsCA, "TLS CA certificate file")
	fs.BoolVar(&f.tlsFirst, "tlsfirst", f.tlsFirst, "TLS handshake before the NATS protocol")
	fs.StringVar(&f.prefix, "prefix", f.prefix, "jetflow subject prefix (default jetflow)")
	fs.StringVar(&f.inboxPrefix, "inbox-prefix", f.inboxPrefix, "subject prefix of reply inboxes (default _INBOX); a user's own inbox prefix, as its subscribe permission allows")
	fs.DurationVar(&f.timeout, "timeout", f.timeout, "bound for each operation")
}

// natsContext is the part of a nats CLI context file jetflow uses.
type natsContext struct {
	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
	Token    string `json:"token"`
	Creds    string `json:"creds"`
	NKey     string `json:"nkey"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
	TLSFirst bool   `json:"tls_first"`
	// InboxPrefix replaces _INBOX in reply subjects, as in the nats CLI.
	InboxPrefix string `json:"inbox_prefix"`
	// Fields jetflow cannot honour are refused rather than ignored.
	JSDomain    string `json:"jetstream_domain"`
	JSAPIPrefix string `json:"jetstream_api_prefix"`
}

// loadContext reads the named nats CLI context.
func (f *connFlags) loadContext(name string) (*natsContext, string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return nil, "", fmt.Errorf("invalid context name %q", name)
	}
	base := os.Getenv("XDG_CONFIG_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, "", fmt.Errorf("context %s: no home directory: %w", name, err)
		}
		base = filepath.Join(home, ".config")
	}
	path := filepath.Join(base, "nats", "context", name+".json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, path, fmt.Errorf("context %s: %w (list contexts with 'nats context ls')", name, err)
	}
	var nctx natsContext
	if err := json.Unmarshal(data, &nctx); err != nil {
		return nil, path, fmt.Errorf("context %s: %s is not a nats context file: %w", name, path, err)
	}
	if nctx.JSDomain != "" || nctx.JSAPIPrefix != "" {
		return nil, path, fmt.Errorf("context %s sets a JetStream domain or API prefix, which jetflow does not support", name)
	}
	return &nctx, path, nil
}

// options returns the URL and nats options the flags, the environment and
// the context select. Explicit flags win over the context.
func (f *connFlags) options() (string, []nats.Option, error) {
	name := f.context
	if name == "" {
		name = os.Getenv("NATS_CONTEXT")
	}
	var nctx natsContext
	from := ""
	if name != "" {
		c, path, err := f.loadContext(name)
		if err != nil {
			return "", nil, err
		}
		nctx, from = *c, "context "+name+" ("+path+")"
	}
	pick := func(flagVal, ctxVal string) string {
		if flagVal != "" {
			return flagVal
		}
		return ctxVal
	}
	url := f.server
	switch {
	case url != "":
		from = "-s"
	case nctx.URL != "":
	case os.Getenv("NATS_URL") != "":
		url, from = os.Getenv("NATS_URL"), "NATS_URL"
	default:
		url, from = defaultURL, "the default"
	}
	if url == "" {
		url = nctx.URL
	}
	f.resolvedURL, f.resolvedFrom = url, from
	opts := []nats.Option{nats.Name("jetflow-cli"), nats.Timeout(f.timeout), nats.NoReconnect()}
	if creds := pick(f.creds, nctx.Creds); creds != "" {
		opts = append(opts, nats.UserCredentials(expandHome(creds)))
	}
	if nk := pick(f.nkey, nctx.NKey); nk != "" {
		o, err := nats.NkeyOptionFromSeed(expandHome(nk))
		if err != nil {
			return "", nil, fmt.Errorf("nkey %s: %w", nk, err)
		}
		opts = append(opts, o)
	}
	if u := pick(f.user, nctx.User); u != "" {
		opts = append(opts, nats.UserInfo(u, pick(f.password, nctx.Password)))
	}
	if tok := pick(f.token, nctx.Token); tok != "" {
		opts = append(opts, nats.Token(tok))
	}
	cert, key := pick(f.tlsCert, nctx.Cert), pick(f.tlsKey, nctx.Key)
	if (cert == "") != (key == "") {
		return "", nil, usagef("--tlscert and --tlskey go together")
	}
	if cert != "" {
		opts = append(opts, nats.ClientCert(expandHome(cert), expandHome(key)))
	}
	if ca := pick(f.tlsCA, nctx.CA); ca != "" {
		opts = append(opts, nats.RootCAs(expandHome(ca)))
	}
	if f.tlsFirst || nctx.TLSFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	if p := pick(f.inboxPrefix, nctx.InboxPrefix); p != "" {
		// A user whose subscribe permission is its own inbox prefix
		// (docs/security.md) receives no reply under _INBOX.
		if err := validInboxPrefix(p); err != nil {
			return "", nil, usagef("--inbox-prefix: %v", err)
		}
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	return url, opts, nil
}

// validInboxPrefix checks p the way nats.CustomInboxPrefix does, so that a
// bad prefix is a usage error rather than a failed connection.
func validInboxPrefix(p string) error {
	if p == "" || strings.ContainsAny(p, ">* \t\r\n") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, "..") {
		return fmt.Errorf("%q is not a subject prefix: tokens separated by dots, no wildcards or spaces", p)
	}
	return nil
}

func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

// connectError reports a failed connection; it exits with exitConnect.
type connectError struct {
	url, from string
	err       error
}

func (e *connectError) Error() string {
	return fmt.Sprintf("cannot connect to %s (from %s): %v", e.url, e.from, e.err)
}

func (e *connectError) Unwrap() error { return e.err }

// session is a connection and the jetflow handles on it.
type session struct {
	nc *nats.Conn
	cl *framework.Client
	in *framework.Inspector
	op *inspect.Operator
}

func (s *session) Close() { s.nc.Close() }

// open connects and bounds ctx by the --timeout flag: the start of every
// command that makes one round of requests. done closes both.
func (c *cli) open(ctx context.Context) (*session, context.Context, func(), error) {
	s, err := c.connect()
	if err != nil {
		return nil, ctx, func() {}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.conn.timeout)
	return s, ctx, func() { cancel(); s.Close() }, nil
}

// connect opens the connection the flags describe.
func (c *cli) connect() (*session, error) {
	url, opts, err := c.conn.options()
	if err != nil {
		return nil, err
	}
	if c.conn.prefix != "" {
		if _, err := streams.NewNames(c.conn.prefix); err != nil {
			return nil, usagef("--prefix: %v", err)
		}
	}
	opts = append(opts, nats.ErrorHandler(c.refused.record))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, &connectError{url: url, from: c.conn.resolvedFrom, err: err}
	}
	var fo []framework.ClientOption
	if c.conn.prefix != "" {
		fo = append(fo, framework.WithPrefix(c.conn.prefix))
	}
	cl, err := framework.NewClient(nc, fo...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &session{nc: nc, cl: cl, in: cl.Inspector(), op: inspect.New(cl)}, nil
}

// refusals keeps the permission violations the server reported on the
// command's connections. A request the server refuses only times out; the
// reason arrives apart, as an asynchronous error, and is what the operator
// needs to see.
type refusals struct {
	mu   sync.Mutex
	seen []string
}

// maxRefusals bounds how many distinct refusals a failed command reports.
const maxRefusals = 4

func (r *refusals) record(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	msg := err.Error()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) < maxRefusals && !slices.Contains(r.seen, msg) {
		r.seen = append(r.seen, msg)
	}
}

// list returns the refusals recorded so far.
func (r *refusals) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// isAuthErr reports the server's authorization errors.
func isAuthErr(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || strings.Contains(strings.ToLower(err.Error()), "authorization")
}
