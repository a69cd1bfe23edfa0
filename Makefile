GO ?= go
BIN ?= bin/imserver
IMAGE ?= imserver
# The version `imserver version` and /healthz report; the commit and its
# time come from the Go build info.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# COMMIT covers builds without VCS stamping (-buildvcs=false, no .git in a
# container build context).
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# Largest file the repository may track (binaries and profiles stay out).
MAX_FILE_BYTES ?= 1048576

.PHONY: build run test test-postgres lint fuzz bench clean image check-size

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) .

image:
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE):$(VERSION) -t $(IMAGE):latest .

check-size:
	@git ls-files -z | xargs -0 stat -c '%s %n' 2>/dev/null | \
		awk -v max=$(MAX_FILE_BYTES) '$$1 > max { print "tracked file over " max " bytes: " $$2 " (" $$1 " bytes)"; bad = 1 } END { exit bad }'

run:
	$(GO) run -ldflags "$(LDFLAGS)" . serve

# The browser tests run after the other packages, not beside them: a
# Chromium starved by race-instrumented packages on two cores misses its
# waits. The server's protocol tests run a second time on PostgreSQL
# (started by the tests); `make test-postgres` runs that half alone.

test:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /e2e$$)
	$(GO) test -race -count=1 ./e2e/
	IMSERVER_TEST_STORE=postgres $(GO) test -race -count=1 ./server/

test-postgres:
	IMSERVER_TEST_STORE=postgres $(GO) test -race -count=1 ./server/

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -w needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

fuzz:
	$(GO) test -run XXX -fuzz FuzzDecodeFrame -fuzztime 60s ./server/

bench: build
	$(GO) test -run XXX -bench . -benchtime 3s ./storage/ ./seq/
	$(BIN) bench --scenario all

clean:
	rm -rf bin
