#!/usr/bin/env bash
# `make run`: create the database if missing, migrate, load the demo, then run
# `ballet serve` in the foreground, printing the URL and the demo token.
set -euo pipefail
BIN=${1:-bin/ballet}
URL=${BALLET_DATABASE_URL:-postgres://postgres:ballet@127.0.0.1:5432/ballet?sslmode=disable}

# The database named in the URL; create it through the server's postgres database.
DB=$(sed -E 's#^[a-z]+://[^/]*/([^?]*).*#\1#' <<<"$URL")
ADMIN_URL=$(sed -E "s#^([a-z]+://[^/]*/)[^?]*#\1postgres#" <<<"$URL")
if command -v psql >/dev/null 2>&1; then
	if [ "$(psql -w "$ADMIN_URL" -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != 1 ]; then
		echo "run: creating database $DB"
		psql -w "$ADMIN_URL" -qc "CREATE DATABASE \"$DB\""
	fi
else
	echo "run: psql is not installed; not creating database $DB (it must exist)"
fi

# Without a provider key the gateway answers from the scripted demo model.
if [ -z "${ANTHROPIC_API_KEY:-}${OPENAI_API_KEY:-}${BALLET_GATEWAY_FAKE:-}" ]; then
	export BALLET_GATEWAY_FAKE=demo
	echo "run: no provider key configured; the gateway uses the scripted demo model (gateway.fake = demo)"
fi

echo "run: applying migrations ($BIN migrate up)"
"$BIN" migrate up
echo "run: loading the demo data ($BIN demo)"
DEMO=$("$BIN" demo --json)
TOKEN=$(sed -E 's/.*"token": ?"([^"]+)".*/\1/' <<<"$DEMO")
# A development server listens on this machine only unless told otherwise
# (BALLET_SERVER_ADDR=:8080, BALLET_GATEWAY_ADDR=:8082 listen everywhere).
export BALLET_SERVER_ADDR=${BALLET_SERVER_ADDR:-127.0.0.1:8080}
export BALLET_GATEWAY_ADDR=${BALLET_GATEWAY_ADDR:-127.0.0.1:8082}
ADDR=$BALLET_SERVER_ADDR
PORT=${ADDR##*:}
echo "run: demo loaded: $DEMO"
# `ballet chat` reads the token from here when neither --token nor $BALLET_TOKEN is given.
mkdir -p .dev
(umask 077 && printf '%s\n' "$TOKEN" >.dev/demo-token)
chmod 600 .dev/demo-token
echo "run: starting $BIN serve (api, worker and gateway; Ctrl-C stops it)"
cat <<MSG
run: serving on http://127.0.0.1:$PORT, listening on $BALLET_SERVER_ADDR (gateway on $BALLET_GATEWAY_ADDR; health: /healthz, /readyz; metrics: http://${BALLET_METRICS_ADDR:-127.0.0.1:8083}/metrics)
run: web app  http://127.0.0.1:$PORT/  (sign in by pasting the token $TOKEN)
run: try  curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:$PORT/api/v1/projects/DEMO/runnable
run: chat with  $BIN chat$( [ "$PORT" = 8080 ] || echo " --url http://127.0.0.1:$PORT")
MSG
exec "$BIN" serve
