#!/usr/bin/env bash
# Traces one task's path through jetflow (see main.go) and prints the path
# with its files and returns. Run from the repository root. It installs
# Delve when missing and writes the trace to $TMPDIR.
set -euo pipefail
dlv_version=v1.27.2
gobin=$(go env GOPATH)/bin
if [ ! -x "$gobin/dlv" ]; then
	GOFLAGS= go install "github.com/go-delve/delve/cmd/dlv@$dlv_version"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go -C bench build -gcflags='all=-N -l' -o "$tmp/pathtrace" ./pathtrace
"$gobin/dlv" trace --exec "$tmp/pathtrace" 'jetflow-io/jetflow/(framework|internal|streams)|main\.trace(Begin|End)' >"$tmp/trace.out" 2>&1
go -C bench run ./pathtrace -analyze "$tmp/trace.out" -root "$PWD"
