# Aperio: build, test and measure. Every target works on a fresh machine
# with Go; `bench` also uses wrk and nginx from Debian (bench/run.sh says
# what it needs).

GO      ?= go
BIN     ?= bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/aperio-dev/aperio/internal/buildinfo.version=$(VERSION)

.PHONY: all build test vet demo bench clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# The test suite: vet, formatting, and every test with the race detector.
test: vet
	$(GO) test -race -count=1 -timeout 15m ./...

vet:
	$(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

# Build and run a server, a client and a demo backend on this machine.
demo: build
	bash scripts/demo.sh

bench:
	bash bench/run.sh

clean:
	rm -rf $(BIN)
