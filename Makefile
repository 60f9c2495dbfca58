# idemgate — run `make help` for the list of targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO       ?= go
SERVICES := deploy/local/services.sh
CONFIG   ?= deploy/local/idemgate.yaml
# Each target that needs Redis and PostgreSQL starts them (when they are not
# already up) and exports their URLs; tests read the TEST_* names.
# TEST_TOPOLOGY=1 tells the topology tests that nginx and PgBouncer (and the
# console's browser test that chromium) are installed, so they run instead
# of skipping.
WITH_SERVICES = eval "$$($(SERVICES) --cluster --topology)"; export REDIS_URL DATABASE_URL REDIS_CLUSTER_URL; \
	export TEST_REDIS_URL="$$REDIS_URL" TEST_DATABASE_URL="$$DATABASE_URL" TEST_REDIS_CLUSTER_URL="$$REDIS_CLUSTER_URL" TEST_TOPOLOGY=1;

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## build bin/idemgate, bin/idemgate-examples (idemgate with the example jobs), bin/partnersim and the example shipments receiver
	$(GO) build -o bin/idemgate ./cmd/idemgate
	$(GO) build -o bin/idemgate-examples ./examples/cmd/idemgate-examples
	$(GO) build -o bin/partnersim ./examples/cmd/partnersim
	$(GO) build -o bin/shipments-receiver ./examples/shipments/cmd/shipments-receiver

.PHONY: services
services: ## start Redis, PostgreSQL and a Redis Cluster on loopback and print their URLs
	@$(SERVICES) --cluster

# make run starts Redis and PostgreSQL only (not the Redis Cluster, nor
# nginx, PgBouncer or chromium, which make test needs); what it or make
# test started keeps a pid file under IDEMGATE_LOCAL_STATE
# (default /tmp/idemgate-local), and make stop stops exactly that.
.PHONY: run
run: build ## start Redis and PostgreSQL, migrate, and run the demo (bin/idemgate-examples dev) with deploy/local/idemgate.yaml
	@eval "$$($(SERVICES))"; export REDIS_URL DATABASE_URL; \
	  ./bin/idemgate-examples migrate up --config $(CONFIG) && exec deploy/local/run.sh $(CONFIG)

.PHONY: stop
stop: ## stop the Redis, PostgreSQL and Redis Cluster that make run or make test started (their pid files under IDEMGATE_LOCAL_STATE), nothing else
	@$(SERVICES) --stop

# The TypeScript parts: the example receiver (built, then tested by itself
# and end to end from cmd/idemgate), the check that a client generated
# from the served OpenAPI document type-checks, and the producer SDK
# (tested against a real gateway, bin/idemgate).
NODE_DIRS := examples/receiver-node openapi/tscheck sdk/typescript

.PHONY: node
node: ## install the TypeScript parts' packages (npm ci) and build the example receiver
	@command -v npm >/dev/null || deploy/local/node.sh
	@for d in $(NODE_DIRS); do (cd $$d && npm ci --no-audit --no-fund --loglevel=error); done
	cd examples/receiver-node && npm run --silent build
	cd sdk/typescript && npm run --silent build

.PHONY: test
test: node lint ## start the services, then make lint, go vet and go test -race every package of both modules (integration tests included), the TypeScript tests and make docs
	@$(WITH_SERVICES) \
	  $(GO) vet ./...; \
	  (cd examples/receiver-node && npm test --silent); \
	  $(GO) build -o bin/idemgate ./cmd/idemgate; \
	  $(GO) build -o bin/idemgate-examples ./examples/cmd/idemgate-examples; \
	  (cd deploy/manifests && $(GO) vet ./... && IDEMGATE_BIN=$(CURDIR)/bin/idemgate IDEMGATE_EXAMPLES_BIN=$(CURDIR)/bin/idemgate-examples $(GO) test -count=1 ./...); \
	  (cd sdk/typescript && IDEMGATE_BIN=$(CURDIR)/bin/idemgate npm test --silent); \
	  $(GO) test -race -count=1 -timeout 30m ./...; \
	  (cd tools && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 20m ./...); \
	  if command -v $(MKDOCS) >/dev/null; then $(MAKE) --no-print-directory docs; else echo "mkdocs is not installed: the documentation site is not built (apt-get install mkdocs mkdocs-material)"; fi

# The console's pages as the docs show them: the browser test run alone,
# saving docs/console-*.png. It needs Redis, PostgreSQL and chromium (which
# --topology installs), not the Redis Cluster.
.PHONY: screenshots
screenshots: ## run the console's browser test in headless Chromium and save its screenshots to docs/console-*.png
	@eval "$$($(SERVICES) --topology)"; export TEST_REDIS_URL="$$REDIS_URL" TEST_DATABASE_URL="$$DATABASE_URL" TEST_TOPOLOGY=1; \
	  $(GO) build -o bin/idemgate-examples ./examples/cmd/idemgate-examples; \
	  cd tools && IDEMGATE_SCREENSHOTS=1 IDEMGATE_EXAMPLES_BIN=$(CURDIR)/bin/idemgate-examples \
	  $(GO) test -count=1 -run '^TestConsoleInBrowser$$' -v ./browsertest

.PHONY: test-short
test-short: ## unit tests only, no services needed
	$(GO) test -count=1 ./...
	cd tools && $(GO) test -count=1 ./...

.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	@for t in middleware/idempotency:FuzzParseKey middleware/idempotency:FuzzFingerprint \
	  ijson:FuzzAppendCanonical ijson:FuzzCheck \
	  middleware/idempotency:FuzzCanonicalInjective config:FuzzParse config:FuzzExpand \
	  config:FuzzParseRateLimit job:FuzzParseTemplate job:FuzzRenderInjective receiver:FuzzParse receiver:FuzzVerify; do \
	  $(GO) test ./$${t%%:*} -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $${FUZZTIME:-30s} || exit 1; \
	done

# golangci-lint (.golangci.yaml: govet, staticcheck, unused) is pinned as a
# tool in tools/go.mod; `go tool -n` prints the path of its cached build,
# which then lints the main module from the root.
.PHONY: lint
lint: ## gofmt, then golangci-lint (govet, staticcheck, unused) on the main module and the tools module
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	@lint="$$(cd tools && $(GO) tool -n golangci-lint)"; \
	  $$lint run ./... && (cd tools && $$lint run ./...)

# Benchmarks: idemgate next to a plain reverse proxy (tools/cmd/idembench, BENCHMARKS.md).
# They need Redis and PostgreSQL only, started like `make services` does;
# BENCHFLAGS, SCALEFLAGS and SOAKFLAGS pass more flags to `idembench run`,
# `idembench scale` and `idembench soak`.
BENCH_SERVICES = eval "$$($(SERVICES))"; export REDIS_URL DATABASE_URL;
# The benchmark and the fault suite are the tools module's (tools/go.mod).
BUILD_IDEMBENCH = (cd tools && $(GO) build -o ../bin/idembench ./cmd/idembench)

.PHONY: bench
bench: build ## benchmark every scenario and store against a plain proxy, with pprof profiles (about 15 minutes)
	@$(BENCH_SERVICES) $(BUILD_IDEMBENCH) && ./bin/idembench run -profile $(BENCHFLAGS)

.PHONY: bench-quick
bench-quick: build ## the same scenarios in about 2 minutes
	@$(BENCH_SERVICES) $(BUILD_IDEMBENCH) && ./bin/idembench run -quick $(BENCHFLAGS)

.PHONY: bench-river
bench-river: build ## idemgate's worker next to River, both writing one effect row a job, at concurrency 10 and 50, on a private PostgreSQL and Redis (about 2 minutes; RIVERFLAGS)
	@$(BENCH_SERVICES) $(BUILD_IDEMBENCH) && ./bin/idembench run -scenarios river -private -jobs 5000 -rounds 2 $(RIVERFLAGS)

.PHONY: bench-river-sweep
bench-river-sweep: build ## the river scenario at concurrency 1, 10, 50 and 200: jobs/s, handler p50 / p99 and WAL syncs per job, plotted in river.png, on a private PostgreSQL and Redis (about 5 minutes; RIVERFLAGS)
	@$(BENCH_SERVICES) $(BUILD_IDEMBENCH) && ./bin/idembench run -scenarios river -private -jobs 3000 -rounds 1 -river-concurrency 1,10,50,200 $(RIVERFLAGS)

.PHONY: bench-scale
bench-scale: build ## claims, replays, 409s and the janitor with 1M and 10M stored records, per store (about 20 minutes; SCALEFLAGS)
	@$(BENCH_SERVICES) $(BUILD_IDEMBENCH) && ./bin/idembench scale $(SCALEFLAGS)

.PHONY: bench-scale-jobs
bench-scale-jobs: ## the job tables under the retention janitor: final jobs written and deleted, rows and sizes sampled (about 2 minutes; SCALEFLAGS)
	@$(BENCH_SERVICES) $(BUILD_IDEMBENCH) && ./bin/idembench scale -stores jobs $(SCALEFLAGS)

.PHONY: bench-capacity
bench-capacity: build ## requests held in flight up to 10,000 through the plain proxy and idemgate, then shedding: RSS, goroutines, latency (about 3 minutes; CAPACITYFLAGS)
	@$(BENCH_SERVICES) $(BUILD_IDEMBENCH) && ./bin/idembench capacity $(CAPACITYFLAGS)

.PHONY: soak
soak: build ## idemgate at a fixed rate for 10 minutes: RSS and goroutines at start and end
	@$(BENCH_SERVICES) $(BUILD_IDEMBENCH) && ./bin/idembench soak -duration 10m $(SOAKFLAGS)

# The fault suite (tools/cmd/idemchaos, RELIABILITY.md): it starts its own Redis
# and PostgreSQL on free loopback ports, never the shared ones, and stops
# everything it started; CHAOSFLAGS passes more flags (-scenario, -keys,
# -short, -json, -dir; a later -idemgate measures another binary).
.PHONY: chaos
chaos: build ## run the fault suite against private Redis and PostgreSQL servers (about 15 minutes)
	@$(BENCH_SERVICES) (cd tools && $(GO) build -o ../bin/idemchaos ./cmd/idemchaos) && $(GO) build -o bin/idemgate-examples ./examples/cmd/idemgate-examples && ./bin/idemchaos -idemgate bin/idemgate-examples $(CHAOSFLAGS)

# The documentation site: mkdocs.yml and docs/, built by Debian's mkdocs
# and mkdocs-material (apt-get install mkdocs mkdocs-material) into site/.
# Strict: a broken link, or a nav entry without its page, fails the build.
MKDOCS ?= mkdocs

.PHONY: docs
docs: ## build the documentation site into site/ with mkdocs --strict (needs Debian's mkdocs and mkdocs-material)
	@command -v $(MKDOCS) >/dev/null && [ -d /usr/share/mkdocs/themes/material ] || { echo "make docs needs mkdocs and mkdocs-material: apt-get install mkdocs mkdocs-material"; exit 1; }
	$(MKDOCS) build --strict --quiet

# The pictures the site's home shows: the site itself (docs/img/docs-*.png,
# taken by tools/browsertest from the built site served on loopback) and
# the console's pages (docs/console-*.png, by `make screenshots`).
.PHONY: docs-screenshots
docs-screenshots: docs screenshots ## build the site, then take its pictures and the console's in headless Chromium (docs/img/, docs/console-*.png)
	cd tools && IDEMGATE_DOCS_SCREENSHOTS=1 $(GO) test -count=1 -run '^TestSiteScreenshots$$' -v ./browsertest
