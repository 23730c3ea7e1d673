# Ballet Planner. `make run` starts a working stack; `make test` runs every test.
SHELL := /bin/bash
GO ?= go
BIN := bin/ballet
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The database `make run` uses, and the server tests make their own databases
# on: user postgres with the dev password "ballet", as in docker-compose.yml and
# deploy/dev/services.sh (which gives a distribution cluster that password).
BALLET_DATABASE_URL ?= postgres://postgres:ballet@127.0.0.1:5432/ballet?sslmode=disable
BALLET_TEST_DATABASE_URL ?= postgres://postgres:ballet@127.0.0.1:5432/postgres?sslmode=disable
export BALLET_DATABASE_URL BALLET_TEST_DATABASE_URL

.PHONY: build run test lint services bench clean web cluster

build:
	@GO=$(GO) deploy/dev/build.sh $(BIN) '$(LDFLAGS)'

services:
	@deploy/dev/services.sh

run: services build
	@deploy/dev/run.sh $(BIN)

# Several processes of each kind on this machine (3 api, 3 worker, 2 gateway)
# against the same Postgres and Redis; Ctrl-C stops them all.
cluster: services build
	@deploy/dev/cluster.sh --bin $(BIN)

# deploy/kubernetes, its compat/ and deploy/monitoring are modules of their
# own (kustomize, the Kubernetes API types and Prometheus stay out of the
# product's go.mod); compat/ renders the manifests with the kustomize of
# kubectl 1.31 (go.mod) and of kubectl 1.30 (kubectl130.mod).
test: services
	@deploy/dev/services.sh chromium node compose promtool shells
	$(GO) test -race -count=1 -timeout 20m ./...
	cd deploy/kubernetes && $(GO) test -race -count=1 ./...
	cd deploy/kubernetes/compat && $(GO) test -count=1 ./... && $(GO) test -count=1 -modfile=kubectl130.mod ./...
	cd deploy/monitoring && $(GO) test -race -count=1 ./...

# The browser app: api/web/dist is committed (embedded by api/web/web.go), so `make run`
# needs no Node; this rebuilds it from api/web/src with the locked npm packages.
web:
	cd api/web && npm ci --no-audit --no-fund && npm run build

lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd deploy/kubernetes && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd deploy/kubernetes/compat && $(GO) vet ./... && $(GO) vet -modfile=kubectl130.mod ./... && $(GO) run $(STATICCHECK) ./...
	cd deploy/monitoring && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

bench: services
	$(GO) test -run '^$$' -bench . -benchtime 20x ./...

clean:
	rm -rf bin .dev
