# The two commands of the README: `make demo` and `make test`. Everything they need is installed
# and started from here; built tools are cached under $(TOA_CACHE) between runs.
SHELL := /bin/bash
GO ?= go
export TOA_CACHE ?= $(HOME)/.cache/toa-deploy
BIN := $(CURDIR)/bin

.PHONY: build test unit fuzz setup demo bench fmt vet clean

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# vet and format first: they fail in seconds, the end-to-end tests take minutes
# the control plane is stopped afterwards whatever the result; its binaries stay cached
test: vet fuzz setup
	$(GO) test -count=1 -timeout 28m ./...; status=$$?; bash testdata/controlplane/down.sh; exit $$status

# the tests that need nothing but Go
unit:
	$(GO) test -short ./...

# the loaders of the user's YAML fuzzed a few seconds each (their seeds and the corpus kept in
# internal/app/toa/testdata/fuzz run in every go test); an input that fails is written there, to keep as a case
FUZZTIME ?= 5s
fuzz:
	@for target in FuzzContext FuzzManifest; do \
	  $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) ./internal/app/toa/ || exit 1; \
	done

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	bash testdata/tools/staticcheck.sh ./...

# the real parts the tests talk to: a registry, npm's packages, a control plane
setup:
	bash testdata/setup.sh

demo: build setup
	bash testdata/demo.sh

bench: build setup
	bash testdata/bench.sh

clean:
	rm -rf $(BIN) deployment
