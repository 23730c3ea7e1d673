#!/usr/bin/env bash
# tools/lighthouse/run.sh: Lighthouse's accessibility and best-practices
# scores of every page of the web app, desktop and mobile, printed as a
# Markdown table (the goal, docs/benchmarks.md: 95 or more everywhere).
#
#   tools/lighthouse/run.sh [--min N] [--json FILE]
#
# It builds ballet, creates a fresh database (ballet_lighthouse_PID, on the
# server of $BALLET_DATABASE_URL, default the dev Postgres), migrates it and
# loads the demo (`ballet demo`, which prints the demo's token), and starts
# `ballet serve` on free loopback ports with the scripted demo model and a
# Redis namespace of its own. audit.mjs then has the planner answer in a
# session (so each page has content), and runs Lighthouse (the npm package
# locked in this folder, installed here by `npm ci` when missing) for each
# page in the desktop and the mobile form factor, signed in the way the app
# is: its token in the tab's session storage. Lighthouse drives Debian's
# chromium ($CHROME_PATH, default /usr/bin/chromium; headless, --no-sandbox
# as root); nothing downloads a browser. On exit it stops the server and
# drops the database and the Redis keys.
#
# --min N    exit 1 when a score is below N (default 95)
# --json F   write every audit that lost points, with its first items, to F
#
# Needs Postgres and Redis (deploy/dev/services.sh), Node 18.16 or later
# and chromium (deploy/dev/services.sh node chromium), psql, and Go.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/tools/lighthouse
MIN=95
JSON=
while [ $# -gt 0 ]; do
	case $1 in
	--min) MIN=$2; shift 2 ;;
	--json) JSON=$(realpath -m "$2"); shift 2 ;;
	-h | --help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "run.sh: unknown argument $1 (want --min N, --json FILE)" >&2; exit 2 ;;
	esac
done
export CHROME_PATH=${CHROME_PATH:-/usr/bin/chromium}
[ -x "$CHROME_PATH" ] || { echo "run.sh: $CHROME_PATH is missing: deploy/dev/services.sh chromium installs it" >&2; exit 1; }
command -v psql >/dev/null || { echo "run.sh: psql is missing" >&2; exit 1; }

URL=${BALLET_DATABASE_URL:-postgres://postgres:ballet@127.0.0.1:5432/ballet?sslmode=disable}
DB=ballet_lighthouse_$$
ADMIN_URL=$(sed -E "s#^([a-z]+://[^/]*/)[^?]*#\1postgres#" <<<"$URL")
DB_URL=$(sed -E "s#^([a-z]+://[^/]*/)[^?]*#\1$DB#" <<<"$URL")
NS=lighthouse$$-
WORK=$(mktemp -d)
PID=
cleanup() {
	if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
	psql -w "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS \"$DB\"" >/dev/null 2>&1 || true
	if command -v redis-cli >/dev/null; then
		for p in "$NS*" "asynq:{$NS*"; do
			redis-cli -u "${BALLET_REDIS_URL:-redis://127.0.0.1:6379/0}" --scan --pattern "$p" | xargs -r redis-cli -u "${BALLET_REDIS_URL:-redis://127.0.0.1:6379/0}" del >/dev/null
		done
		redis-cli -u "${BALLET_REDIS_URL:-redis://127.0.0.1:6379/0}" smembers asynq:queues | grep "^$NS" |
			xargs -r redis-cli -u "${BALLET_REDIS_URL:-redis://127.0.0.1:6379/0}" srem asynq:queues >/dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

# A free loopback port: the kernel's choice for a socket bound to port 0.
port() { node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'; }

[ -d "$HERE/node_modules/lighthouse" ] || (cd "$HERE" && npm ci --no-audit --no-fund >&2)
echo "run.sh: building ballet" >&2
(cd "$ROOT" && go build -o "$WORK/ballet" ./cmd/ballet)
psql -w "$ADMIN_URL" -qc "CREATE DATABASE \"$DB\"" >/dev/null

export BALLET_DATABASE_URL=$DB_URL BALLET_REDIS_NAMESPACE=$NS BALLET_GATEWAY_FAKE=demo BALLET_LOG_LEVEL=warn
API=127.0.0.1:$(port)
GW=127.0.0.1:$(port)
export BALLET_SERVER_ADDR=$API BALLET_GATEWAY_ADDR=$GW BALLET_GATEWAY_URL=http://$GW
export BALLET_WORKER_ADDR=127.0.0.1:$(port) BALLET_METRICS_ADDR=127.0.0.1:$(port)
"$WORK/ballet" migrate up >&2
TOKEN=$("$WORK/ballet" demo --json | sed -E 's/.*"token": ?"([^"]+)".*/\1/')
"$WORK/ballet" serve 2>"$WORK/serve.log" &
PID=$!
for _ in $(seq 1 300); do
	curl -fsS "http://$API/readyz" >/dev/null 2>&1 && break
	kill -0 "$PID" 2>/dev/null || { cat "$WORK/serve.log" >&2; echo "run.sh: ballet serve stopped" >&2; exit 1; }
	sleep 0.1
done
echo "run.sh: ballet serve on http://$API (database $DB)" >&2

BALLET_URL=http://$API BALLET_TOKEN=$TOKEN LIGHTHOUSE_MIN=$MIN LIGHTHOUSE_JSON=$JSON node "$HERE/audit.mjs"
