#!/usr/bin/env bash
# Makes sure Postgres and Redis answer for `make run` and `make test`.
#
#   deploy/dev/services.sh [--try cluster,local,apt,docker] [postgres] [redis] [chromium] [node] [compose] [promtool] [shells]
#
# For each service: use it when it already answers; else, in the order of
# --try (default: all, in this order):
#   cluster  a distribution cluster configured on the port (pg_lsclusters), started with pg_ctlcluster
#   local    the installed binaries with data under .dev/ (initdb; run as the postgres user when root)
#   apt      install the packages with apt-get (root only), then cluster and local again
#   docker   `docker compose up -d` the service of docker-compose.yml
# chromium (asked for by name; `make test` does) installs Debian's chromium
# with apt-get when /usr/bin/chromium is missing, as root, for the browser test;
# node (also asked for by `make test`) installs nodejs and npm the same way, for
# the test that rebuilds the web bundle; compose installs Debian's
# docker-compose, whose loader checks docker-compose.yml in a test, and
# promtool Debian's prometheus package (promtool and the prometheus server),
# for the tests that check /metrics, the alert rules and the dashboard, and
# shells Debian's zsh and fish, which syntax-check the completion scripts.
# It says what it does, prints the URL it checked ("postgres ready: URL"), and
# on failure lists every step it tried and why that step failed.
#
# Postgres is reached as user postgres with the dev password "ballet", the same
# as docker-compose.yml and the Makefile's URLs. When a distribution cluster
# asks for a password on TCP (scram-sha-256, its default) and its postgres role
# has none, the script sets the dev password through the local socket and says so.
#
# Environment: PGHOST, PGPORT (127.0.0.1:5432), REDIS_HOST, REDIS_PORT (127.0.0.1:6379).
set -euo pipefail

PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
PG_PASSWORD=ballet
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEV="$ROOT/.dev"
TRY=cluster,local,apt,docker
WANT=()

say() { printf 'services: %s\n' "$*"; }
die() { say "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
	case $1 in
	--try)
		[ $# -ge 2 ] || die "--try needs a value: a comma-separated list of cluster, local, apt, docker"
		TRY=$2
		shift 2
		;;
	--try=*) TRY=${1#--try=}; shift ;;
	postgres | redis | chromium | node | compose | promtool | shells) WANT+=("$1"); shift ;;
	-h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (want --try LIST, postgres, redis, chromium, node, compose, promtool, shells)" ;;
	esac
done
[ ${#WANT[@]} -gt 0 ] || WANT=(postgres redis)
for m in ${TRY//,/ }; do
	case $m in cluster | local | apt | docker) ;; *) die "--try: unknown method \"$m\" (want cluster, local, apt, docker)" ;; esac
done
for v in PGPORT REDIS_PORT; do
	[[ ${!v} =~ ^[0-9]+$ ]] || die "$v: \"${!v}\" is not a port number"
done

PG_URL="postgres://postgres:$PG_PASSWORD@$PGHOST:$PGPORT/postgres?sslmode=disable"
REDIS_URL="redis://$REDIS_HOST:$REDIS_PORT/0"

TRIED=() # what was tried for the current service, and how it failed
note() { TRIED+=("$*"); }
tail_of() { tail -n "${2:-3}" "$1" 2>/dev/null | tr '\n' ' ' | sed 's/ *$//'; }
wants() { [[ ,$TRY, == *",$1,"* ]]; }
is_root() { [ "$(id -u)" = 0 ]; }

answers() { # host port
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

wait_for() { # host port: 30 s for a server that was just started
	local _
	for _ in $(seq 1 60); do
		answers "$1" "$2" && return 0
		sleep 0.5
	done
	return 1
}

pg_bindir() {
	local d
	for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
		[ -x "$d/postgres" ] && [ -x "$d/initdb" ] && { echo "$d"; return 0; }
	done
	command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return 0; }
	return 1
}

as_pg_user() { # runs a command as the postgres user when we are root (postgres refuses to run as root)
	if is_root; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# cluster_on_port prints "version name owner" of the distribution cluster configured on PGPORT.
# pg_lsclusters prints nothing and fails when a cluster it lists vanishes
# under it (another one being dropped at that moment): it is asked again.
cluster_on_port() {
	command -v pg_lsclusters >/dev/null 2>&1 || return 1
	local out=""
	for _ in 1 2 3 4 5; do
		out=$(pg_lsclusters -h 2>/dev/null) && break
	done
	awk -v p="$PGPORT" '$3 == p { print $1, $2, $5; exit }' <<<"$out" | grep .
}

start_cluster() {
	local ver name owner out
	if ! command -v pg_ctlcluster >/dev/null 2>&1; then
		note "distribution cluster: pg_ctlcluster is not installed (no postgresql-common)"
		return 1
	fi
	if ! read -r ver name owner < <(cluster_on_port); then
		note "distribution cluster: none is configured on port $PGPORT (pg_lsclusters)"
		return 1
	fi
	say "postgres not answering; starting the distribution cluster $ver/$name (pg_ctlcluster)"
	if ! out=$(pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start 2>&1); then
		note "distribution cluster $ver/$name: pg_ctlcluster start failed: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
		return 1
	fi
	wait_for "$PGHOST" "$PGPORT" && return 0
	note "distribution cluster $ver/$name: started, but nothing answered on $PGHOST:$PGPORT within 30s (is listen_addresses without $PGHOST?)"
	return 1
}

# pg_data_dir sets PGDATA_DIR: .dev/pg, or, when root and the postgres user
# cannot reach .dev (a clone under a mode-700 home), a directory of its own.
pg_data_dir() {
	PGDATA_DIR="$DEV/pg"
	is_root || return 0
	if ! id postgres >/dev/null 2>&1 && ! useradd --system --no-create-home postgres; then
		note "local binaries: there is no postgres user and useradd failed"
		return 1
	fi
	if [ ! -s "$PGDATA_DIR/PG_VERSION" ]; then
		if ! { mkdir -p "$PGDATA_DIR" && chown postgres: "$PGDATA_DIR" && chmod 700 "$PGDATA_DIR"; }; then
			note "local binaries: cannot make the data directory $PGDATA_DIR"
			return 1
		fi
	fi
	runuser -u postgres -- test -w "$PGDATA_DIR" -a -x "$PGDATA_DIR" 2>/dev/null && return 0
	local p=$PGDATA_DIR blocker=$PGDATA_DIR
	while [ "$p" != / ]; do
		p=$(dirname "$p")
		runuser -u postgres -- test -x "$p" 2>/dev/null || blocker=$p
	done
	rmdir "$PGDATA_DIR" 2>/dev/null || true
	PGDATA_DIR="/var/lib/ballet-dev/$(basename "$ROOT")-$(printf %s "$ROOT" | cksum | cut -d' ' -f1)/pg"
	say "the postgres user cannot reach $DEV ($blocker is mode $(stat -c '%a, owned by %U' "$blocker")) and postgres refuses to run as root; its data goes under $PGDATA_DIR instead"
	if ! { mkdir -p "$PGDATA_DIR" && chown postgres: "$PGDATA_DIR" && chmod 700 "$PGDATA_DIR"; }; then
		note "local binaries: the postgres user cannot reach $DEV ($blocker), and making $PGDATA_DIR failed"
		return 1
	fi
}

start_local_postgres() {
	local bin pwfile out
	if ! bin=$(pg_bindir); then
		note "local binaries: no postgres binaries (looked in /usr/lib/postgresql/*/bin and PATH)"
		return 1
	fi
	pg_data_dir || return 1
	if [ ! -s "$PGDATA_DIR/PG_VERSION" ]; then
		say "postgres not answering; initdb of a new cluster under $PGDATA_DIR ($bin)"
		if ! mkdir -p "$PGDATA_DIR" 2>/dev/null; then
			note "local binaries $bin: cannot make the data directory $PGDATA_DIR"
			return 1
		fi
		pwfile=$(mktemp)
		printf '%s\n' "$PG_PASSWORD" >"$pwfile"
		is_root && chown postgres "$pwfile"
		out=$(as_pg_user "$bin/initdb" -D "$PGDATA_DIR" -U postgres --auth-local=trust \
			--auth-host=scram-sha-256 --pwfile="$pwfile" 2>&1) || {
			rm -f "$pwfile"
			note "local binaries $bin: initdb -D $PGDATA_DIR failed: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
			return 1
		}
		rm -f "$pwfile"
	fi
	say "starting $bin/postgres on $PGHOST:$PGPORT with data under $PGDATA_DIR (log: $PGDATA_DIR/server.log)"
	if ! out=$(as_pg_user "$bin/pg_ctl" -D "$PGDATA_DIR" -l "$PGDATA_DIR/server.log" -w -t 60 start \
		-o "-h $PGHOST -p $PGPORT -k /tmp" 2>&1); then
		note "local binaries $bin: pg_ctl start failed: $(tail -n 2 <<<"$out" | tr '\n' ' ') $(tail_of "$PGDATA_DIR/server.log")"
		return 1
	fi
	wait_for "$PGHOST" "$PGPORT" && return 0
	note "local binaries $bin: postgres started but did not answer on $PGHOST:$PGPORT within 30s: $(tail_of "$PGDATA_DIR/server.log")"
	return 1
}

start_local_redis() {
	local out
	if ! command -v redis-server >/dev/null 2>&1; then
		note "local binaries: no redis-server in PATH"
		return 1
	fi
	say "redis not answering; starting redis-server on $REDIS_HOST:$REDIS_PORT with data under $DEV/redis"
	if ! mkdir -p "$DEV/redis" 2>/dev/null; then
		note "local binaries: cannot make the data directory $DEV/redis"
		return 1
	fi
	if ! out=$(redis-server --daemonize yes --bind "$REDIS_HOST" --port "$REDIS_PORT" --save "" --appendonly no \
		--maxmemory-policy noeviction --dir "$DEV/redis" --logfile "$DEV/redis/redis.log" \
		--pidfile "$DEV/redis/redis.pid" 2>&1); then
		note "local binaries: redis-server failed: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
		return 1
	fi
	wait_for "$REDIS_HOST" "$REDIS_PORT" && return 0
	note "local binaries: redis-server did not answer on $REDIS_HOST:$REDIS_PORT within 30s: $(tail_of "$DEV/redis/redis.log")"
	return 1
}

apt_install() { # have-it-already-test packages...
	local have=$1 log
	shift
	if $have; then
		note "apt-get: not needed, $* already installed"
		return 1
	fi
	if ! is_root; then
		note "apt-get: not run, installing $* needs root"
		return 1
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		note "apt-get: not installed (not a Debian-like system)"
		return 1
	fi
	log=$(mktemp)
	say "installing $* with apt-get (downloads packages: a minute or two)"
	if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >"$log" 2>&1; then
		note "apt-get: installing $* failed: $(tail_of "$log")"
		rm -f "$log"
		return 1
	fi
	rm -f "$log"
}

compose_up() { # service port-variable
	local out
	if ! command -v docker >/dev/null 2>&1; then
		note "docker compose: docker is not installed"
		return 1
	fi
	if ! out=$(docker info 2>&1 >/dev/null); then
		note "docker compose: the docker engine does not answer (docker info: $(grep -m1 -i error <<<"$out" || head -n1 <<<"$out"))"
		return 1
	fi
	if [ ! -f "$ROOT/docker-compose.yml" ]; then
		note "docker compose: no $ROOT/docker-compose.yml"
		return 1
	fi
	say "starting $1 with docker compose (the first start pulls the image: a few minutes)"
	local compose=(docker compose)
	docker compose version >/dev/null 2>&1 || compose=(docker-compose)
	if ! out=$(PGPORT=$PGPORT REDIS_PORT=$REDIS_PORT "${compose[@]}" -f "$ROOT/docker-compose.yml" up -d "$1" 2>&1); then
		note "docker compose: up -d $1 failed: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
		return 1
	fi
}

have_pg() { pg_bindir >/dev/null; }
have_redis() { command -v redis-server >/dev/null 2>&1; }

start_postgres() {
	local m
	for m in cluster local apt docker; do
		if ! wants "$m"; then
			note "$m: skipped (not in --try $TRY)"
			continue
		fi
		case $m in
		cluster) start_cluster && return 0 ;;
		local) start_local_postgres && return 0 ;;
		apt)
			if apt_install have_pg postgresql postgresql-contrib; then
				{ answers "$PGHOST" "$PGPORT" || start_cluster || start_local_postgres; } && return 0
			fi
			;;
		docker) compose_up postgres && { wait_for "$PGHOST" "$PGPORT" || { note "docker compose: postgres did not answer on $PGHOST:$PGPORT within 30s"; false; }; } && return 0 ;;
		esac
	done
	return 1
}

start_redis() {
	local m
	for m in local apt docker; do
		if ! wants "$m"; then
			note "$m: skipped (not in --try $TRY)"
			continue
		fi
		case $m in
		local) start_local_redis && return 0 ;;
		apt) apt_install have_redis redis-server && { answers "$REDIS_HOST" "$REDIS_PORT" || start_local_redis; } && return 0 ;;
		docker) compose_up redis && { wait_for "$REDIS_HOST" "$REDIS_PORT" || { note "docker compose: redis did not answer on $REDIS_HOST:$REDIS_PORT within 30s"; false; }; } && return 0 ;;
		esac
	done
	return 1
}

gave_up() { # name host port
	say "could not start $1 on $2:$3. Tried, in order:" >&2
	local t
	for t in "${TRIED[@]}"; do printf '  - %s\n' "$t" >&2; done
	exit 1
}

# pg_login tries the dev URL; its error, if any, is in PG_LOGIN_ERR.
pg_login() {
	local _
	for _ in $(seq 1 60); do
		PG_LOGIN_ERR=$(PGCONNECT_TIMEOUT=10 psql -w "$PG_URL" -tAc 'SELECT 1' 2>&1 >/dev/null) && return 0
		[[ $PG_LOGIN_ERR == *"starting up"* ]] || return 1
		sleep 0.5
	done
	return 1
}

# fix_pg_password gives role postgres of the distribution cluster on PGPORT the
# dev password, when the cluster asks for one on TCP and the role has none.
fix_pg_password() {
	local ver name owner has runas=()
	local advice="give role postgres the password \"$PG_PASSWORD\", or set BALLET_DATABASE_URL and BALLET_TEST_DATABASE_URL to URLs that log in"
	if ! read -r ver name owner < <(cluster_on_port); then
		say "postgres on $PGHOST:$PGPORT refuses $PG_URL ($PG_LOGIN_ERR), and it is no distribution cluster (pg_lsclusters) whose role this script could set: $advice" >&2
		exit 1
	fi
	if is_root; then
		cd / # a working directory the owner may not reach
		runas=(runuser -u "$owner" --)
	elif [ "$(id -un)" != "$owner" ]; then
		say "cluster $ver/$name on port $PGPORT refuses $PG_URL ($PG_LOGIN_ERR); setting its password needs root or user $owner: run as root, or: sudo -u $owner psql --cluster $ver/$name -c \"ALTER ROLE postgres PASSWORD '$PG_PASSWORD'\"" >&2
		exit 1
	fi
	if ! has=$("${runas[@]}" psql --cluster "$ver/$name" -w -d postgres -tAc \
		"SELECT rolpassword IS NOT NULL FROM pg_authid WHERE rolname = 'postgres'" 2>&1); then
		say "cluster $ver/$name refuses $PG_URL ($PG_LOGIN_ERR), and reading its roles through the local socket as $owner failed: $has" >&2
		exit 1
	fi
	case $has in
	f)
		"${runas[@]}" psql --cluster "$ver/$name" -w -d postgres -qc "ALTER ROLE postgres PASSWORD '$PG_PASSWORD'" || {
			say "cluster $ver/$name: setting the password of role postgres failed" >&2
			exit 1
		}
		say "cluster $ver/$name asks for a password on TCP (pg_hba.conf) and role postgres had none: set it to the dev password \"$PG_PASSWORD\" through the local socket as $owner (undo: ALTER ROLE postgres PASSWORD NULL)"
		;;
	t)
		say "cluster $ver/$name refuses $PG_URL ($PG_LOGIN_ERR): role postgres has a password of its own, left as it is; $advice" >&2
		exit 1
		;;
	*)
		say "cluster $ver/$name refuses $PG_URL ($PG_LOGIN_ERR) and has no role postgres: $advice" >&2
		exit 1
		;;
	esac
}

ensure_postgres() {
	TRIED=()
	if answers "$PGHOST" "$PGPORT"; then
		say "postgres answers on $PGHOST:$PGPORT; using it"
	else
		start_postgres || gave_up postgres "$PGHOST" "$PGPORT"
	fi
	if ! command -v psql >/dev/null 2>&1; then
		say "psql is not installed, so the login was not checked"
	elif ! pg_login; then
		case $PG_LOGIN_ERR in
		*"password authentication failed"* | *"no password supplied"*) fix_pg_password ;;
		*)
			say "postgres on $PGHOST:$PGPORT answers but refuses $PG_URL: $PG_LOGIN_ERR" >&2
			exit 1
			;;
		esac
		pg_login || {
			say "postgres on $PGHOST:$PGPORT still refuses $PG_URL: $PG_LOGIN_ERR" >&2
			exit 1
		}
	fi
	say "postgres ready: $PG_URL"
}

ensure_redis() {
	TRIED=()
	if answers "$REDIS_HOST" "$REDIS_PORT"; then
		say "redis answers on $REDIS_HOST:$REDIS_PORT; using it"
	else
		start_redis || gave_up redis "$REDIS_HOST" "$REDIS_PORT"
	fi
	say "redis ready: $REDIS_URL"
}

# ensure_package NAME CHECK PACKAGES...: installs PACKAGES with apt-get, as
# root, when the command CHECK is missing.
ensure_package() {
	local name=$1 check=$2
	shift 2
	if command -v "$check" >/dev/null 2>&1; then
		say "$name ready: $(command -v "$check")"
		return
	fi
	[ "$(id -u)" = 0 ] || die "$name is missing and this is not root: install it (apt-get install $*)"
	say "$name is missing: installing $* with apt-get (for the tests)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null; } ||
		die "apt-get install $* failed"
	say "$name ready: $(command -v "$check")"
}

ensure_chromium() { ensure_package chromium chromium chromium; }
ensure_node() { ensure_package node npm nodejs npm; }
ensure_promtool() { ensure_package promtool promtool prometheus && ensure_package prometheus prometheus prometheus; }
ensure_shells() { ensure_package zsh zsh zsh && ensure_package fish fish fish; }
ensure_compose() {
	if docker compose version >/dev/null 2>&1; then say "compose ready: docker compose"; return; fi
	ensure_package compose docker-compose docker-compose
}

for s in "${WANT[@]}"; do
	"ensure_$s"
done
