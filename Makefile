# riverbus — `make` lists the targets.
.DEFAULT_GOAL := help
GO ?= go
PKGS := ./...

.PHONY: help run test test/core test/watermill test/race test/short bench chaos lint tidy build install generate schema

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z\/_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build the riverbus binary into bin/
	$(GO) build -o bin/riverbus ./cmd/riverbus

install: ## Install the riverbus command into $GOBIN, else $(go env GOPATH)/bin, as go install does
	$(GO) install ./cmd/riverbus
	@dir="$$($(GO) env GOBIN)"; dir="$${dir:-$$($(GO) env GOPATH | cut -d: -f1)/bin}"; \
	echo "installed $$dir/riverbus"; \
	case ":$$PATH:" in *":$$dir:"*) ;; *) echo "$$dir is not on your PATH: export PATH=\"$$dir:\$$PATH\"" ;; esac

run: build ## Run the demo: throwaway PostgreSQL (unless DATABASE_URL is set), fan-out, workers, River UI
	./bin/riverbus run --demo

test: ## Every test, integration included, against a PostgreSQL the tests start; then the Watermill module's
	$(GO) vet $(PKGS)
	cd watermill && $(GO) vet ./...
	$(MAKE) --no-print-directory test/core test/watermill

test/core: ## The core module's tests
	$(GO) test -count=1 -timeout 20m $(PKGS)

test/watermill: ## The Watermill adapter's tests, Watermill's universal Pub/Sub suite among them
	cd watermill && $(GO) test -count=1 -timeout 30m ./...

test/race: ## Every test with the race detector
	$(GO) test -count=1 -race -timeout 30m $(PKGS)

test/short: ## Fast tests only (skips multi-process and restart tests)
	$(GO) test -count=1 -short $(PKGS)
	cd watermill && $(GO) test -count=1 -short ./...

# The Watermill bench takes --scale (and --runs, --json, --database-url) but
# not the core bench's scenarios: it gets BENCH_FLAGS' --scale unless
# WATERMILL_BENCH_FLAGS says otherwise.
WATERMILL_BENCH_FLAGS ?= $(shell printf '%s\n' '$(BENCH_FLAGS)' | grep -oE -- '--scale(=| +)[^ ]+')

bench: ## Build and run bin/riverbus-bench (riverbus beside raw River: bench/results.json, about 18 min on 2 cores), then bin/riverbus-watermill-bench (the Watermill adapter beside watermill-sql: bench/watermill.json); BENCH_FLAGS="--scale 0.1" for a quick look
	$(GO) build -o bin/riverbus-bench ./cmd/riverbus-bench
	cd watermill && $(GO) build -o ../bin/riverbus-watermill-bench ./cmd/riverbus-watermill-bench
	./bin/riverbus-bench $(BENCH_FLAGS)
	./bin/riverbus-watermill-bench $(WATERMILL_BENCH_FLAGS)

chaos: ## Try hard to lose an event for 5 min (CHAOS_DURATION=30m for longer): kill -9s, a PostgreSQL crash, late commits
	RIVERBUS_CHAOS_DURATION=$(or $(CHAOS_DURATION),5m) $(GO) test ./integration -run TestChaos -count=1 -v -timeout 2h

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)
	cd watermill && $(GO) vet ./...

tidy: ## go mod tidy, in both modules
	$(GO) mod tidy
	cd watermill && $(GO) mod tidy

generate: ## go generate
	$(GO) generate $(PKGS)

schema: ## Regenerate migrations/schema.sql (a throwaway PostgreSQL, migrated, dumped)
	$(GO) generate ./migrations
