#!/usr/bin/env bash
# Makes sure Postgres and Redis answer for `make run` and `make test`.
# For each service, in order: use it if it already answers; else start a local
# binary with data under .dev/; else install it with apt (as root); else
# `docker compose up -d`. It says which it did.
set -euo pipefail

PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEV="$ROOT/.dev"

say() { printf 'services: %s\n' "$*"; }

answers() { # host port
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

wait_for() { # name host port
	for _ in $(seq 1 60); do
		answers "$2" "$3" && return 0
		sleep 0.5
	done
	say "$1 did not answer on $2:$3 after 30s" >&2
	return 1
}

pg_bindir() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/postgres" ] && { echo "$d"; return 0; }
	done
	command -v postgres >/dev/null 2>&1 && { dirname "$(command -v postgres)"; return 0; }
	return 1
}

as_pg_user() { # runs a command as a non-root user when we are root (initdb refuses root)
	if [ "$(id -u)" = 0 ]; then
		id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

start_local_postgres() {
	# A cluster the distribution manages comes first.
	if [ "$PGPORT" = 5432 ] && command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ] && [ -n "$(ls /etc/postgresql 2>/dev/null)" ]; then
		local v
		v=$(ls /etc/postgresql | sort -V | tail -n 1)
		say "postgres not answering; starting the local cluster $v/main (pg_ctlcluster)"
		pg_ctlcluster --skip-systemctl-redirect "$v" main start && return 0
	fi
	local bin
	bin=$(pg_bindir) || return 1
	say "postgres not answering; starting $bin/postgres with data under .dev/pg"
	mkdir -p "$DEV"
	if [ ! -s "$DEV/pg/PG_VERSION" ]; then
		mkdir -p "$DEV/pg"
		[ "$(id -u)" = 0 ] && chown -R postgres "$DEV/pg" 2>/dev/null || true
		as_pg_user "$bin/initdb" -D "$DEV/pg" -U postgres --auth=trust >/dev/null
	fi
	[ "$(id -u)" = 0 ] && chown -R postgres "$DEV/pg"
	as_pg_user "$bin/pg_ctl" -D "$DEV/pg" -l "$DEV/pg/log" -w start \
		-o "-h $PGHOST -p $PGPORT -k /tmp" >/dev/null
}

start_local_redis() {
	command -v redis-server >/dev/null 2>&1 || return 1
	say "redis not answering; starting redis-server with data under .dev/redis"
	mkdir -p "$DEV/redis"
	redis-server --daemonize yes --bind "$REDIS_HOST" --port "$REDIS_PORT" --save "" --appendonly no \
		--maxmemory-policy noeviction --dir "$DEV/redis" --logfile "$DEV/redis/redis.log"
}

apt_install() { # packages...
	[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
	say "installing $* with apt-get"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

compose_up() { # service
	command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 || return 1
	say "starting $1 with docker compose"
	docker compose -f "$ROOT/docker-compose.yml" up -d "$1"
}

ensure() { # name host port start-local apt-packages...
	local name=$1 host=$2 port=$3 local_start=$4
	shift 4
	if answers "$host" "$port"; then
		say "$name answers on $host:$port; using it"
		return 0
	fi
	if $local_start && wait_for "$name" "$host" "$port"; then return 0; fi
	if apt_install "$@" && $local_start && wait_for "$name" "$host" "$port"; then return 0; fi
	if compose_up "$name" && wait_for "$name" "$host" "$port"; then return 0; fi
	say "could not start $name: no local binary, no apt as root, no docker engine" >&2
	return 1
}

ensure postgres "$PGHOST" "$PGPORT" start_local_postgres postgresql postgresql-contrib
ensure redis "$REDIS_HOST" "$REDIS_PORT" start_local_redis redis-server
