GO ?= go
BIN ?= bin/imserver

.PHONY: build run test lint fuzz bench clean

build:
	$(GO) build -o $(BIN) .

run:
	$(GO) run . serve

# The protocol tests run a second time on PostgreSQL (started by the tests).
test:
	$(GO) test -race -count=1 ./...
	IMSERVER_TEST_STORE=postgres $(GO) test -race -count=1 ./server/

lint:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

fuzz:
	$(GO) test -run XXX -fuzz FuzzDecodeFrame -fuzztime 60s ./server/

bench: build
	$(GO) test -run XXX -bench . -benchtime 3s ./storage/ ./seq/
	$(BIN) bench --scenario all

clean:
	rm -rf bin
