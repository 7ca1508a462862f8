# Developer entry points. CI runs .ci/run, which uses the same targets.
BIN := $(CURDIR)/.bin
export PATH := $(BIN):/usr/local/go/bin:$(PATH)

.PHONY: all build test generate check-generated lint tools bench fuzz test-kube test-jaeger

all: build

build:
	go build ./...

test:
	go test -race ./...

tools: ## Install the pinned code generators and linter into .bin (see tools/go.mod).
	cd tools && GOBIN=$(BIN) go install tool

generate: tools
	cd api && buf generate

check-generated: generate
	@git diff --exit-code -- gen || (echo "gen/ is stale: run 'make generate' and commit the result" >&2; exit 1)
	@test -z "$$(git status --porcelain -- gen)" || (echo "gen/ has files not committed: run 'make generate' and commit" >&2; git status --porcelain -- gen >&2; exit 1)

lint: tools
	gofmt -l $$(git ls-files '*.go' | grep -v '^gen/') | tee /dev/stderr | (! read)
	go vet ./...
	golangci-lint run ./...

bench:
	go test -run '^$$' -bench . -benchmem ./...

fuzz: ## Run every fuzz target for FUZZTIME (default 20s) each; see tools/fuzz.sh.
	bash tools/fuzz.sh

# The first run builds kube-apiserver (tools/kube-apiserver, ~7 min on 2 busy cores)
# into the user cache inside a test, hence the longer timeout; see internal/kubetest.
test-kube: ## Run the tests against a real kube-apiserver (names containing Kube).
	SWITCHBOARD_KUBE=1 go test -race -timeout 30m -run Kube ./...

# The first run builds Jaeger (tools/jaeger, a few minutes) into the user cache inside a
# test, hence the longer timeout; see internal/jaegertest and docs/operations.md, "Tracing".
test-jaeger: ## Run the tracing tests against a real Jaeger (names containing Jaeger).
	SWITCHBOARD_JAEGER=1 go test -race -timeout 30m -run Jaeger ./...
