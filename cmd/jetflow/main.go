// Command jetflow inspects and steers jetflow queues on a NATS server: queue
// status, tasks, dead letters, repeating schedules, pauses, circuit
// breakers, workflow runs, blocked ordering keys, rate limits and
// uniqueness reservations. It connects like the nats CLI (-s/--server,
// NATS_URL, --context, --creds, --nkey, TLS flags) and prints tables, or
// JSON with --json.
//
// Usage:
//
//	jetflow [connection flags] COMMAND [flags] [args]
//
// Run "jetflow help" for the commands, and see docs/cli.md.
//
// Exit status: 0 on success, 1 when the operation failed (including "not
// found"), 2 on a usage error, 3 when the server cannot be reached.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	exitConnect = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand: name (possibly two words, "dlq ls"), a one-line
// summary, and its implementation.
type command struct {
	name    string
	args    string // positional arguments, for usage
	summary string
	// flags registers the command's own flags.
	flags func(fs *flag.FlagSet, c *cli)
	run   func(ctx context.Context, c *cli, args []string) error
}

// commands lists every command; help prints them in this order.
func commands() []*command {
	var cs []*command
	cs = append(cs, statusCommands()...)
	cs = append(cs, workerCommands()...)
	cs = append(cs, taskCommands()...)
	cs = append(cs, dlqCommands()...)
	cs = append(cs, cronCommands()...)
	cs = append(cs, controlCommands()...)
	cs = append(cs, keyCommands()...)
	cs = append(cs, laneCommands()...)
	cs = append(cs, keyLimitCommands()...)
	cs = append(cs, tenantCommands()...)
	cs = append(cs, partitionCommands()...)
	cs = append(cs, workflowCommands()...)
	cs = append(cs, serveCommands()...)
	cs = append(cs, upgradeCommands()...)
	return cs
}

// cli is the state one invocation shares between its parts.
type cli struct {
	// stdout and stderr make control characters visible (termSafe): what
	// the CLI prints comes from the wire. rawStdout and rawStderr are for
	// the CLI's own escape sequences (status --watch, progress lines).
	stdout, stderr       io.Writer
	rawStdout, rawStderr io.Writer
	conn                 connFlags
	json                 bool
	// stderrTerminal makes progress redraw one line.
	stderrTerminal bool
	// refused collects the server's permission violations, named when a
	// command fails.
	refused refusals
}

// usageError marks an error in the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	safeOut, safeErr := &termSafe{w: stdout}, &termSafe{w: stderr}
	defer safeOut.flush()
	defer safeErr.flush()
	c := &cli{stdout: safeOut, stderr: safeErr, rawStdout: stdout, rawStderr: stderr}
	if f, ok := stderr.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			c.stderrTerminal = true
		}
	}
	// Connection flags may come before the command.
	global := flag.NewFlagSet("jetflow", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	c.conn.register(global)
	global.BoolVar(&c.json, "json", false, "print JSON")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "jetflow: %v\nRun 'jetflow help' for usage.\n", err)
		return exitUsage
	}
	rest := global.Args()
	if len(rest) == 0 || rest[0] == "help" {
		if len(rest) > 1 {
			if cmd, _ := lookup(rest[1:]); cmd != nil {
				printCommandHelp(stdout, c, cmd)
				return exitOK
			}
			if group := groupOf(rest[1]); len(group) > 0 {
				printGroupHelp(stdout, c, rest[1], group)
				return exitOK
			}
			fmt.Fprintf(stderr, "jetflow help: unknown command %q\n", strings.Join(rest[1:min(3, len(rest))], " "))
			printHelp(stderr)
			return exitUsage
		}
		printHelp(stdout)
		if len(rest) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, n := lookup(rest)
	if group := groupOf(rest[0]); cmd == nil && len(group) > 0 {
		// "jetflow tasks" or "jetflow tasks --help": the group's commands.
		if len(rest) > 1 && rest[1] != "-h" && rest[1] != "--help" && rest[1] != "-help" {
			fmt.Fprintf(stderr, "jetflow: unknown command %q\n", strings.Join(rest[:2], " "))
			printGroupHelp(stderr, c, rest[0], group)
			return exitUsage
		}
		printGroupHelp(stdout, c, rest[0], group)
		if len(rest) == 1 {
			return exitUsage
		}
		return exitOK
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "jetflow: unknown command %q\nRun 'jetflow help' for the commands.\n", strings.Join(rest[:min(2, len(rest))], " "))
		return exitUsage
	}
	fs := newFlagSet(c, cmd)
	pos, err := parseInterspersed(fs, rest[n:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandHelp(stdout, c, cmd)
			return exitOK
		}
		fmt.Fprintf(stderr, "jetflow %s: %v\nRun 'jetflow help %s' for usage.\n", cmd.name, err, cmd.name)
		return exitUsage
	}
	err = cmd.run(ctx, c, pos)
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "jetflow %s: %v\nRun 'jetflow help %s' for usage.\n", cmd.name, err, cmd.name)
		return exitUsage
	}
	msg, code := explain(err, c)
	fmt.Fprintf(stderr, "jetflow %s: %s\n", cmd.name, msg)
	return code
}

// newFlagSet returns the flag set of cmd: its own flags, the connection
// flags and --json.
func newFlagSet(c *cli, cmd *command) *flag.FlagSet {
	fs := flag.NewFlagSet("jetflow "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.conn.register(fs)
	fs.BoolVar(&c.json, "json", c.json, "print JSON")
	if cmd.flags != nil {
		cmd.flags(fs, c)
	}
	return fs
}

// lookup finds the command named by the first one or two words of args and
// returns it with the number of words used.
func lookup(args []string) (*command, int) {
	cs := commands()
	if len(args) >= 2 {
		for _, cmd := range cs {
			if cmd.name == args[0]+" "+args[1] {
				return cmd, 2
			}
		}
	}
	for _, cmd := range cs {
		if cmd.name == args[0] {
			return cmd, 1
		}
	}
	return nil, 0
}

// parseInterspersed parses flags anywhere among the positional arguments
// (the flag package stops at the first non-flag), so that
// "jetflow tasks get ID --json" works. "--" ends flag parsing.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, `jetflow inspects and steers jetflow task queues on NATS JetStream.

Usage:
  jetflow [connection flags] COMMAND [flags] [args]

Commands:
`)
	for _, cmd := range commands() {
		fmt.Fprintf(w, "  %-34s %s\n", strings.TrimSpace(cmd.name+" "+cmd.args), cmd.summary)
	}
	fmt.Fprint(w, `
Connection flags (every command):
  -s, --server URL    NATS server URLs, comma separated (default $NATS_URL, then nats://127.0.0.1:4222)
  --context NAME      a nats CLI context (~/.config/nats/context/NAME.json; default $NATS_CONTEXT)
  --creds FILE        user credentials file
  --nkey FILE         NKey seed file
  --user, --password  user and password; --token TOKEN
  --tlscert FILE --tlskey FILE --tlsca FILE --tlsfirst
  --prefix PREFIX     jetflow subject prefix (default jetflow)
  --inbox-prefix P    reply inbox prefix, for a user limited to its own (default _INBOX)
  --timeout DUR       bound for each operation (default 10s)
  --json              print JSON instead of tables

Exit status: 0 success, 1 failure (including not found), 2 usage error, 3 server unreachable.
Run 'jetflow help COMMAND' for a command's flags.
`)
}

// groupOf returns the commands whose name starts with the word group
// ("tasks" for "tasks get", "tasks ls"…).
func groupOf(group string) []*command {
	var out []*command
	for _, cmd := range commands() {
		if strings.HasPrefix(cmd.name, group+" ") {
			out = append(out, cmd)
		}
	}
	return out
}

// printGroupHelp prints the help of every command of a group.
func printGroupHelp(w io.Writer, c *cli, group string, cmds []*command) {
	fmt.Fprintf(w, "The %s commands:\n\n", group)
	for i, cmd := range cmds {
		if i > 0 {
			fmt.Fprintln(w)
		}
		printCommandHelp(w, c, cmd)
	}
}

func printCommandHelp(w io.Writer, c *cli, cmd *command) {
	fmt.Fprintf(w, "Usage: jetflow %s [flags] %s\n\n%s\n\nFlags:\n", cmd.name, cmd.args, cmd.summary)
	fs := newFlagSet(c, cmd)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	own := flag.NewFlagSet("", flag.ContinueOnError)
	if cmd.flags != nil {
		cmd.flags(own, &cli{})
	}
	for _, n := range names {
		if own.Lookup(n) == nil && !slices.Contains([]string{"json"}, n) {
			continue // connection flags are listed by 'jetflow help'
		}
		f := fs.Lookup(n)
		dash := "--"
		if len(n) == 1 {
			dash = "-"
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			def = " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "  %s%-14s %s%s\n", dash, n, f.Usage, def)
	}
	fmt.Fprintln(w, "\nConnection flags: see 'jetflow help'.")
}
