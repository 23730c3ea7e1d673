#!/usr/bin/env bash
# Runs Ballet as several processes of each kind on this machine, against one
# Postgres database and one Redis namespace: 3 api, 3 worker and 2 gateway
# processes, sharing one generated gateway signing key.
#
#   deploy/dev/cluster.sh [start] [--bin PATH] [--base-port N] [--run-dir DIR]
#   deploy/dev/cluster.sh stop [--run-dir DIR]
#   deploy/dev/cluster.sh restart NAME [--run-dir DIR]     (NAME: api-1 … worker-3, gateway-2)
#
# start migrates the database (creating it with psql when missing), loads the
# demo (`ballet demo`), starts every process with logs and pids under the run
# directory (default .dev/cluster), waits for each one's /readyz, prints the
# api URLs and the demo token, and then waits: Ctrl-C (or `cluster.sh stop`
# from another shell) stops them all. restart starts one process again with
# the settings of the running cluster (after it was killed, say).
#
# Ports, from the base port B (default 18000): api-N serves on B+N−1 (so
# 18000-18002), worker-N's health on B+20+N−1, gateway-N on B+30+N−1 (its
# demo model on B+40+N−1); process i's metrics on B+100+i. The workers are
# split across the gateways, as gateway.url names one: worker-1 and worker-3
# call gateway-1, worker-2 calls gateway-2.
#
# Environment: BALLET_DATABASE_URL (as `make run`), BALLET_REDIS_URL,
# BALLET_REDIS_NAMESPACE and any other BALLET_ setting are passed to every
# process. Without a provider key the gateways answer from the scripted demo
# model (gateway.fake = demo). CLUSTER_BASE_PORT, CLUSTER_RUN_DIR and
# BALLET_BIN stand for the flags.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BALLET_BIN:-}
BASE=${CLUSTER_BASE_PORT:-18000}
RUN=${CLUSTER_RUN_DIR:-$ROOT/.dev/cluster}
CMD=start
NAME=
APIS=3 WORKERS=3 GATEWAYS=2

say() { printf 'cluster: %s\n' "$*"; }
die() { say "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
	case $1 in
	start | stop) CMD=$1; shift ;;
	restart)
		[ $# -ge 2 ] || die "restart needs a process name (api-1 … api-$APIS, worker-1 … worker-$WORKERS, gateway-1 … gateway-$GATEWAYS)"
		CMD=restart NAME=$2
		shift 2
		;;
	--bin) [ $# -ge 2 ] || die "--bin needs a path"; BIN=$2; shift 2 ;;
	--base-port) [ $# -ge 2 ] || die "--base-port needs a port"; BASE=$2; shift 2 ;;
	--run-dir) [ $# -ge 2 ] || die "--run-dir needs a directory"; RUN=$2; shift 2 ;;
	-h | --help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (want start, stop, restart NAME, --bin PATH, --base-port N, --run-dir DIR)" ;;
	esac
done
[[ $BASE =~ ^[0-9]+$ ]] && [ "$BASE" -ge 1024 ] && [ "$BASE" -le 65000 ] || die "base port \"$BASE\" is not a port number from 1024 to 65000"

# pid_of NAME: the pid of a running process of the cluster, or nothing.
pid_of() {
	local pid
	pid=$(cat "$RUN/$1.pid" 2>/dev/null) || return 0
	kill -0 "$pid" 2>/dev/null && echo "$pid"
	return 0
}

names() {
	local i
	for i in $(seq 1 $GATEWAYS); do echo "gateway-$i"; done
	for i in $(seq 1 $WORKERS); do echo "worker-$i"; done
	for i in $(seq 1 $APIS); do echo "api-$i"; done
}

stop_all() {
	local n pid pids=()
	for n in $(names); do
		pid=$(pid_of "$n")
		if [ -n "$pid" ]; then
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid")
		fi
		rm -f "$RUN/$n.pid"
	done
	[ ${#pids[@]} -gt 0 ] || { say "no process of the cluster in $RUN is running"; return 0; }
	say "stopping ${#pids[@]} processes (SIGTERM): ${pids[*]}"
	for _ in $(seq 1 150); do
		local alive=0
		for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		[ $alive = 1 ] || { say "stopped"; return 0; }
		sleep 0.2
	done
	say "still running after 30 s; killing them (SIGKILL)"
	kill -KILL "${pids[@]}" 2>/dev/null || true
}

if [ "$CMD" = stop ]; then
	stop_all
	exit 0
fi

# addr_of NAME: the listening address the process's /readyz answers on.
index_of() { echo "${1##*-}"; }
addr_of() {
	local i
	i=$(index_of "$1")
	case $1 in
	api-*) echo "127.0.0.1:$((BASE + i - 1))" ;;
	worker-*) echo "127.0.0.1:$((BASE + 20 + i - 1))" ;;
	gateway-*) echo "127.0.0.1:$((BASE + 30 + i - 1))" ;;
	esac
}
metrics_of() { # a metrics port per process
	local i
	i=$(index_of "$1")
	case $1 in
	api-*) echo "127.0.0.1:$((BASE + 100 + i - 1))" ;;
	worker-*) echo "127.0.0.1:$((BASE + 110 + i - 1))" ;;
	gateway-*) echo "127.0.0.1:$((BASE + 120 + i - 1))" ;;
	esac
}

# launch NAME: starts one process in the background, its log in the run dir.
launch() {
	local n=$1 kind i gw
	kind=${n%-*}
	i=$(index_of "$n")
	case $kind in api | worker | gateway) ;; *) die "no process $n in the cluster" ;; esac
	gw=$(( (i - 1) % GATEWAYS + 1 ))
	local env=(BALLET_DATABASE_MIGRATE=false "BALLET_METRICS_ADDR=$(metrics_of "$n")")
	case $kind in
	api) env+=("BALLET_SERVER_ADDR=$(addr_of "$n")") ;;
	worker) env+=("BALLET_WORKER_ADDR=$(addr_of "$n")" "BALLET_GATEWAY_URL=http://$(addr_of "gateway-$gw")") ;;
	gateway) env+=("BALLET_GATEWAY_ADDR=$(addr_of "$n")" "BALLET_GATEWAY_FAKE_ADDR=127.0.0.1:$((BASE + 40 + i - 1))") ;;
	*) die "no process $n in the cluster" ;;
	esac
	local most=$GATEWAYS
	[ "$kind" != api ] || most=$APIS
	[ "$kind" != worker ] || most=$WORKERS
	[[ $i =~ ^[0-9]+$ ]] && [ "$i" -ge 1 ] && [ "$i" -le "$most" ] || die "no process $n in the cluster"
	[ -z "$(pid_of "$n")" ] || die "$n is running already (pid $(pid_of "$n"))"
	env "${env[@]}" "$BIN" "$kind" >>"$RUN/$n.log" 2>&1 &
	echo $! >"$RUN/$n.pid"
	say "started $n (pid $!) on $(addr_of "$n"), metrics $(metrics_of "$n"), log $RUN/$n.log"
}

# wait_ready NAME...: 60 s for each /readyz to answer 200.
wait_ready() {
	local n
	for n in "$@"; do
		local ok=0
		for _ in $(seq 1 300); do
			[ -n "$(pid_of "$n")" ] || die "$n exited before it was ready; the end of $RUN/$n.log:
$(tail -n 20 "$RUN/$n.log")"
			if ready "$(addr_of "$n")"; then ok=1; break; fi
			sleep 0.2
		done
		[ $ok = 1 ] || die "$n is not ready after 60 s; the end of $RUN/$n.log:
$(tail -n 20 "$RUN/$n.log")"
	done
}

# ready ADDR: /readyz answers 200 (bash's /dev/tcp, no curl needed).
ready() {
	local host=${1%:*} port=${1##*:} status
	{ exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null || return 1
	printf 'GET /readyz HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" >&3
	read -r _ status _ <&3 || true
	exec 3>&-
	[ "$status" = 200 ]
}

if [ "$CMD" = restart ]; then
	[ -f "$RUN/cluster.env" ] || die "no cluster runs from $RUN (no $RUN/cluster.env)"
	# shellcheck disable=SC1091
	. "$RUN/cluster.env"
	BIN=$CLUSTER_BIN BASE=$CLUSTER_BASE
	launch "$NAME"
	wait_ready "$NAME"
	say "$NAME ready"
	exit 0
fi

if [ -z "$BIN" ]; then
	BIN=$ROOT/bin/ballet
	say "building $BIN (go build ./cmd/ballet)"
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$BIN" ./cmd/ballet)
fi
[ -x "$BIN" ] || die "$BIN is not an executable ballet binary"
mkdir -p "$RUN"
for n in $(names); do
	[ -z "$(pid_of "$n")" ] || die "$n of a cluster in $RUN is running (pid $(pid_of "$n")); stop it first: $0 stop --run-dir $RUN"
done

export BALLET_DATABASE_URL=${BALLET_DATABASE_URL:-postgres://postgres:ballet@127.0.0.1:5432/ballet?sslmode=disable}
DB=$(sed -E 's#^[a-z]+://[^/]*/([^?]*).*#\1#' <<<"$BALLET_DATABASE_URL")
ADMIN_URL=$(sed -E "s#^([a-z]+://[^/]*/)[^?]*#\1postgres#" <<<"$BALLET_DATABASE_URL")
if command -v psql >/dev/null 2>&1; then
	if [ "$(psql -w "$ADMIN_URL" -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != 1 ]; then
		say "creating database $DB"
		psql -w "$ADMIN_URL" -qc "CREATE DATABASE \"$DB\""
	fi
fi
if [ -z "${ANTHROPIC_API_KEY:-}${OPENAI_API_KEY:-}${BALLET_GATEWAY_FAKE:-}" ]; then
	export BALLET_GATEWAY_FAKE=demo
	say "no provider key configured; the gateways use the scripted demo model (gateway.fake = demo)"
fi
# One signing key: the workers mint gateway tokens that every gateway checks.
if [ -z "${BALLET_GATEWAY_SIGNING_KEY:-}" ]; then
	BALLET_GATEWAY_SIGNING_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
	say "generated the gateway signing key shared by the workers and the gateways"
fi
export BALLET_GATEWAY_SIGNING_KEY
# What restart needs: the binary, the ports and every BALLET_ setting.
(umask 077 && { printf 'CLUSTER_BIN=%q\nCLUSTER_BASE=%q\n' "$BIN" "$BASE"; export -p | grep -E '^declare -x BALLET_'; } >"$RUN/cluster.env")

say "applying migrations ($BIN migrate up)"
"$BIN" migrate up
say "loading the demo data ($BIN demo)"
DEMO=$("$BIN" demo --json)
TOKEN=$(sed -E 's/.*"token": ?"([^"]+)".*/\1/' <<<"$DEMO")

trap 'trap - INT TERM EXIT; stop_all' INT TERM EXIT
for n in $(names); do launch "$n"; done
# shellcheck disable=SC2046
wait_ready $(names)
for i in $(seq 1 $APIS); do say "api-$i: http://$(addr_of "api-$i")"; done
say "demo token: $TOKEN"
say "try  curl -H \"Authorization: Bearer $TOKEN\" http://$(addr_of api-1)/api/v1/projects/DEMO/runnable"
say "ready: $((APIS + WORKERS + GATEWAYS)) processes (pids and logs in $RUN); Ctrl-C or \`$0 stop --run-dir $RUN\` stops them"
# Waits until stopped (here or by `cluster.sh stop`); a process that dies is
# left dead, for `cluster.sh restart NAME`.
while compgen -G "$RUN/*.pid" >/dev/null; do
	sleep 1 &
	wait $! || true
done
say "stopped from another shell"
