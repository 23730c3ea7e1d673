#!/usr/bin/env bash
# `make build`: fetch the Go modules and compile the binary, saying what it
# does: the first build downloads and compiles every dependency (minutes),
# so each module fetched is named and every 100th package compiled counted.
# Usage: deploy/dev/build.sh OUTPUT LDFLAGS   (GO picks the go command)
set -euo pipefail
OUT=$1
LDFLAGS=${2:-}
GO=${GO:-go}

echo "build: fetching Go modules (the first time downloads every dependency)"
# go mod download -x traces each fetch as "# get <proxy>/<module>/@v/<version>.zip".
"$GO" mod download -x 2>&1 | awk '
	/^# get .*\.zip$/ { p = $3; sub(/^[a-z]+:\/\/[^\/]+\//, "", p); sub(/\/@v\//, "@", p); sub(/\.zip$/, "", p); n++; printf "build: fetched %s\n", p; next }
	/^# get / { next }
	{ print }
	END { if (n > 0) printf "build: %d modules fetched\n", n }'

echo "build: compiling $OUT (the first build compiles every dependency: a few minutes; later ones take seconds)"
# go build -v names each package as it compiles it; anything else is an error to show.
CGO_ENABLED=0 "$GO" build -v -trimpath -ldflags "$LDFLAGS" -o "$OUT" ./cmd/ballet 2>&1 | awk '
	/^[A-Za-z0-9._~\/-]+$/ { n++; last = $0; if (n % 100 == 0) printf "build: %d packages compiled (%s)\n", n, last; next }
	{ print }
	END { if (n > 0) printf "build: %d packages compiled\n", n }'
echo "build: $OUT is ready"
