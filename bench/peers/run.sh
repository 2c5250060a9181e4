#!/usr/bin/env bash
# Runs the peer comparison: installs Redis and PostgreSQL 15 from the Debian
# packages if missing, starts throwaway instances of them and of nats-server
# (go install'ed) in a temporary directory, runs the Go program with the
# given flags (for example -runs 3), and stops everything on exit.
#
# Settings favour the peers where in doubt: Redis without persistence,
# PostgreSQL with fsync, synchronous_commit and full_page_writes off;
# nats-server keeps its defaults (file store).
#
# Needs root for apt-get and to run PostgreSQL as the postgres user.
set -euo pipefail
cd "$(dirname "$0")"

NATS_SERVER_VERSION=v2.15.2
work=$(mktemp -d /tmp/jetflow-peers-XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	if [[ -f "$work/pg/postmaster.pid" ]]; then
		runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$work/pg" -m fast stop >/dev/null 2>&1 || true
	fi
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

if ! command -v redis-server >/dev/null || [[ ! -x /usr/lib/postgresql/15/bin/postgres ]]; then
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server postgresql-15
fi
nats_server=$(command -v nats-server || true)
if [[ -z "$nats_server" ]]; then
	gobin=$(go env GOBIN); gobin=${gobin:-$(go env GOPATH)/bin}
	[[ -x "$gobin/nats-server" ]] || go install "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION"
	nats_server=$gobin/nats-server
fi

redis_port=16379 pg_port=15432 nats_port=14222

redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
	--dir "$work" --logfile "$work/redis.log" &
pids+=($!)

mkdir -p "$work/nats"
"$nats_server" -js -sd "$work/nats" -a 127.0.0.1 -p "$nats_port" >"$work/nats.log" 2>&1 &
pids+=($!)

chmod 755 "$work"
mkdir "$work/pg" && chown postgres "$work/pg"
runuser -u postgres -- /usr/lib/postgresql/15/bin/initdb -D "$work/pg" -A trust -U postgres >/dev/null
runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$work/pg" -l "$work/pg/server.log" -w \
	-o "-p $pg_port -k $work/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" start >/dev/null

for _ in $(seq 100); do
	redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
	sleep 0.1
done

echo "peers: nats-server $("$nats_server" --version), $(redis-server --version | cut -d' ' -f1-3), $(/usr/lib/postgresql/15/bin/postgres --version)" >&2
go run . -nats "nats://127.0.0.1:$nats_port" -redis "127.0.0.1:$redis_port" \
	-pg "postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable" "$@"
