# Ballet Planner. `make run` starts a working stack; `make test` runs every test.
SHELL := /bin/bash
GO ?= go
BIN := bin/ballet
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The database `make run` uses; tests make their own.
BALLET_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/ballet?sslmode=disable
export BALLET_DATABASE_URL

.PHONY: build run test lint services bench clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ballet

services:
	@deploy/dev/services.sh

run: services build
	@deploy/dev/run.sh $(BIN)

test: services
	$(GO) test -race -count=1 -timeout 20m ./...

lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

bench: services
	$(GO) test -run '^$$' -bench . -benchtime 20x ./...

clean:
	rm -rf bin .dev
