package main

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var resultRE = regexp.MustCompile(`(?m)^RESULT payment orders=(\d+) charged=(\d+) duplicate_charges=(\d+) gateway_requests=(\d+) receipts=(\d+) duplicate_receipts=(\d+)$`)

// runPayment runs the example in process and returns its RESULT numbers.
func runPayment(t *testing.T, args ...string) (out string, n []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, args, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, &stdout, &stderr)
	}
	m := resultRE.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no RESULT line in:\n%s", &stdout)
	}
	n = make([]int, 6)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return stdout.String(), n
}

// TestPayment: with the ledger every order is charged and e-mailed once, and
// retries after the charge do not call the gateway again; without it the
// gateway sees every retry and customers get duplicate receipts.
func TestPayment(t *testing.T) {
	t.Parallel()
	t.Run("ledger", func(t *testing.T) {
		t.Parallel()
		out, n := runPayment(t, "-orders", "20")
		// 20 orders; 5 lost responses (orders 4, 8, …, 20) rerun the charge.
		if want := []int{20, 20, 0, 25, 20, 0}; !slices.Equal(n, want) {
			t.Fatalf("RESULT %v, want %v\n%s", n, want, out)
		}
		if !regexp.MustCompile(`(?m)^order-12: succeeded after 3 attempts, charge ch_\d{4} `).MatchString(out) {
			t.Fatalf("no record of order-12 in:\n%s", out)
		}
	})
	t.Run("no-ledger", func(t *testing.T) {
		t.Parallel()
		out, n := runPayment(t, "-orders", "20", "-no-ledger")
		// The 6 accounting failures (orders 3, 6, …, 18) repeat the gateway
		// call (deduplicated there) and the receipt (duplicated).
		if want := []int{20, 20, 0, 31, 20, 6}; !slices.Equal(n, want) {
			t.Fatalf("RESULT %v, want %v\n%s", n, want, out)
		}
	})
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	for _, args := range [][]string{{"-orders", "1"}, {"-timeout", "0s"}, {"extra"}} {
		if _, err := parseFlags(args, &stderr); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

// TestURL runs the example twice against one existing server: the second
// run's tasks do not collide with the first's.
func TestURL(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t, testutil.WithListen())
	for range 2 {
		out, n := runPayment(t, "-orders", "12", "-url", srv.ClientURL())
		if n[0] != 12 || n[1] != 12 || n[2] != 0 {
			t.Fatalf("RESULT %v\n%s", n, out)
		}
		if !regexp.MustCompile(`inspect it: go run ./cmd/jetflow -s \S+ tasks get order-12-\w+`).MatchString(out) {
			t.Errorf("no inspection hint:\n%s", out)
		}
	}
}
