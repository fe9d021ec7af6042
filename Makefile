# Aperio: build, test and measure. Every target works on a fresh machine
# with Go; `bench` also uses wrk and nginx from Debian (bench/run.sh says
# what it needs).

GO      ?= go
BIN     ?= bin
# The semantic version from git tags (scripts/version.sh: v1.2.3 on a tag,
# v1.2.4-dev.N+gCOMMIT after it, v0.0.0-dev.N+gCOMMIT before any) and the
# commit, both stamped into every binary (`aperio-server version`).
VERSION ?= $(shell sh scripts/version.sh)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -s -w -X github.com/aperio-dev/aperio/internal/buildinfo.version=$(VERSION) -X github.com/aperio-dev/aperio/internal/buildinfo.commit=$(COMMIT)

.PHONY: all build test vet demo bench bench-ab bench-syscalls bench-scaling bench-tcp bench-scale-clients bench-scale-visitors bench-scale-held bench-scale-hostnames clean images e2e fuzz release packages

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# Release artifacts in dist/: both binaries for linux, darwin and windows
# on amd64 and arm64 (static, -trimpath, version stamped), one archive and
# one SBOM per platform, and SHA256SUMS; reproducible (deploy/release).
release:
	$(GO) run ./deploy/release -out dist -version $(VERSION) -commit $(COMMIT)

# Linux packages in dist/packages: .deb and .rpm of both binaries for
# amd64 and arm64, with hardened systemd units, man pages and shell
# completions (generated from the command trees, internal/clidoc) and the
# licenses of what the binaries link (deploy/packages).
packages:
	GO="$(GO)" BIN="$(BIN)" VERSION="$(VERSION)" LDFLAGS="$(LDFLAGS)" bash scripts/packages.sh

# The test suite: vet, formatting, and every test with the race detector;
# then the Kubernetes provider, the Helm chart and the packaging tool,
# modules of their own (client-go, Helm and nfpm stay out of ours), vetted
# by their go test (-vet=all: every check go vet makes, on the packages
# the test compiles anyway; a separate go vet compiled client-go a second
# time, about two minutes on a cold cache). Each
# go test run is shown by gotestsum, a line a package, and kept as go test
# -json in $(TEST_OUT); the run ends with every package's time, slowest
# first (scripts/testtimes), and fails if one took over $(TEST_PKG_LIMIT).
TEST_OUT       ?= $(BIN)/test
TEST_PKG_LIMIT ?= 0
GOTESTSUM      := $(abspath $(BIN))/gotestsum
TESTSUM         = $(GOTESTSUM) --format pkgname-and-test-fails --format-hide-empty-pkg --jsonfile $(abspath $(TEST_OUT))/$(1).json --

test: vet
	@mkdir -p $(TEST_OUT) && rm -f $(TEST_OUT)/*.json
	@$(GO) build -o $(GOTESTSUM) gotest.tools/gotestsum
	$(call TESTSUM,main) -race -count=1 -timeout 25m ./...
	$(call TESTSUM,nootlp) -count=1 -tags nootlp -run NoOTLP ./internal/telemetry/
	cd examples/kubernetes-provider && $(call TESTSUM,kubernetes-provider) -race -vet=all -count=1 -timeout 10m ./...
	cd deploy/helm && $(call TESTSUM,helm) -vet=all -count=1 -timeout 10m ./...
	cd deploy/packages && $(call TESTSUM,packages) -vet=all -count=1 -timeout 15m ./...
	@$(GO) run ./scripts/testtimes -over $(TEST_PKG_LIMIT) $(TEST_OUT)/*.json

# The reference Kubernetes provider's static binary (docs/kubernetes.md).
.PHONY: kubernetes-provider
kubernetes-provider:
	@mkdir -p $(BIN)
	cd examples/kubernetes-provider && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(abspath $(BIN))/aperio-kubernetes-provider .

# vet: go vet, gofmt; the client's Windows service glue
# (service_windows.go) is vetted for Windows too. go vet compiles what it
# checks; with -race it compiles it as make test does, which then reuses
# every package instead of compiling the module a second time (on a cold
# cache, minutes). It needs cgo (gcc), as the race detector does; files
# built only without the race detector (none outside tests) go unvetted.
vet:
	$(GO) vet -race ./...
	GOOS=windows $(GO) vet ./cmd/aperio-client
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

# Every native fuzz target for FUZZTIME each (default 10s); a local soak:
# FUZZTIME=10m make fuzz. ONLY=regexp picks targets.
fuzz:
	bash scripts/fuzz.sh

# Build and run a server, a client and a demo backend on this machine. The
# port check comes first, so a taken port fails before the build.
demo:
	bash scripts/demo.sh --check-port
	$(MAKE) build
	bash scripts/demo.sh

bench:
	bash bench/run.sh

# A public TCP port (#23): 1 GiB each way through aperio-server and
# aperio-client, beside the same transfer straight to the backend.
bench-tcp:
	bash bench/tcp.sh

# Mixed traffic (small requests, streams, WebSockets, cold starts, client
# restarts) for DURATION (default 3m): no request lost, and the server's
# RSS, goroutines and fds and a client's RSS and fds flat. See bench/soak.sh.
.PHONY: soak
soak:
	bash bench/soak.sh $(or $(DURATION),3m)

# One Go benchmark before and after a change, alternating, in one run:
# make bench-ab BASE=<rev> [PKG=./router] [BENCH='^BenchmarkServeHTTP$'] [RUNS=10]
bench-ab:
	bash bench/ab.sh "$(BASE)" "$(or $(PKG),./router)" "$(or $(BENCH),^BenchmarkServeHTTP$$)" "$(or $(RUNS),10)"

# Syscalls per proxied request of aperio-server and aperio-client, before
# and after a change, alternating, in one run (#43):
# make bench-syscalls BASE=<rev> [ROUNDS=2] [N=5000]
bench-syscalls:
	bash bench/syscalls.sh "$(BASE)" "$(or $(ROUNDS),2)" "$(or $(N),5000)"

# Autoscaling with real processes: release latency of held requests and
# provider calls per cold start with 2 and 3 servers on one PostgreSQL
# (started if APERIO_TEST_POSTGRES_DSN is unset); FLAP=1 adds the
# 17-minute flapping run. See bench/scaling.sh.
bench-scaling:
	bash bench/scaling.sh

# Scale (#21): 10,000 and 50,000 idle visitor connections (server memory
# per connection, req/s of new visitors beside them), 10,000 requests
# held for a cold start (memory per held request, every answer after the
# release), and route lookup among 1,000 to 100,000 hostnames.
bench-scale-visitors:
	bash bench/scale-visitors.sh

bench-scale-held:
	bash bench/scale-held.sh

bench-scale-hostnames:
	bash bench/scale-hostnames.sh

# 1,000 / 5,000 / 10,000 in-process clients on one aperio-server: RSS and
# heartbeat CPU per client, time to reconnect all after a restart. See
# bench/scale-clients.sh (SCALE_* knobs).
bench-scale-clients:
	bash bench/scale-clients.sh

# Container images (FROM scratch, built locally, no registry needed); see
# docs/docker.md. Repeat runs with the same inputs skip the build.
images:
	IMAGE_PREFIX="$(IMAGE_PREFIX)" IMAGE_TAG="$(IMAGE_TAG)" IMAGE_PUSH="$(IMAGE_PUSH)" bash deploy/images/build.sh server client provider postgres

# The docker-compose end-to-end suite (test/, build tag e2e): builds the
# images it runs, then brings up PostgreSQL, two servers, the reference
# Docker provider and real app containers. Needs Docker and docker-compose.
# test/integration is left out: make test runs it.
e2e: vet
	@mkdir -p $(BIN)
	bash deploy/images/build.sh server provider postgres e2e-app e2e-oidc e2e-pebble >$(BIN)/e2e-images.env
	cd test && E2E_IMAGES=$(abspath $(BIN))/e2e-images.env $(GO) test -tags e2e -count=1 -v -timeout 15m $$($(GO) list -tags e2e ./... | grep -v /test/integration/)

clean:
	rm -rf $(BIN) dist
