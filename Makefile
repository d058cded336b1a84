# Booking service. `make help` lists the targets; variables below can be overridden,
# e.g. `make test PKG=./eventstore/... TEST_ARGS='-run Append -v'`.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-print-directory

#? the Go command every target runs
GO           ?= go
BIN          := bin/booking
# The work tree's revision, linked into the binary (booking --version,
# booking_build_info): the toolchain's own VCS stamping is lost with
# GOFLAGS=-buildvcs=false. Empty (no revision shown) outside a work tree or
# where git refuses one of another owner (safe.directory).
#? revision linked into bin/booking (booking --version); default: git's short HEAD, -dirty if changed
REVISION     ?= $(shell git rev-parse --short HEAD 2>/dev/null)$(shell git rev-parse --git-dir >/dev/null 2>&1 && ! git diff --quiet HEAD -- 2>/dev/null && echo -dirty)
LDFLAGS      := $(if $(REVISION),-X main.revision=$(REVISION))
PG_SH        := test/scripts/pg.sh
# Runs promtool: bin/promtool, unpacked from Debian's prometheus package if missing
# (nothing is installed; no service is enabled or started).
PROMTOOL     := deploy/promtool.sh
# Prints the path of stripe-mock, installing STRIPE_MOCK_VERSION with go install if missing.
STRIPE_MOCK_SH := test/scripts/stripe-mock.sh

# Tests and benchmarks. GOFLAGS from the environment or the command line is passed on.
# ./test/ comes first: go test starts packages in the order given, and the
# end-to-end scenarios take the longest (about 7 of phase 1's 8 minutes on
# 2 cores at go test's default -parallel), so the other packages run beside
# them instead of before them.
#? packages test, test-short and bench-go run
PKG          ?= ./test/ ./...
#? extra go test flags for the test targets (e.g. '-run Append -v')
TEST_ARGS    ?=
#? go test -timeout of each test phase
TEST_TIMEOUT ?= 25m
# Most end-to-end scenarios spend their time waiting on leases, timeouts and
# the provider's slow delay, not on the CPU: go test's default -parallel
# (GOMAXPROCS, 2 here) left the cores idle. Measured on 2 cores, quiet:
# ./test/ took 432 s at -parallel 2 and 168 s at 6. Phases 1 and 4 use it;
# phase 2 keeps the default (its tests stop the server or count statements).
#? go test -parallel of test phases 1 and 4 (t.Parallel tests run at once per package)
TEST_PARALLEL ?= 4
# make test-stress: how many runs of `make test` under a CPU hog.
#? make test-stress: how many runs of make test under the CPU hog
STRESS_RUNS  ?= 1
# make chaos: how long the load and the faults last; CHAOS_ARGS go to the
# chaos program (test/chaos: --rate, --clients, --kill-every, --report, --keep…).
# make test runs a short chaos run of CHAOS_TEST_DURATION as its own phase.
#? make chaos: how long the load and the faults last
DURATION     ?= 10m
#? make chaos: extra flags for test/chaos (--rate, --clients, --kill-every, --report, --keep…)
CHAOS_ARGS   ?=
#? make test: length of its chaos phase (phase 5)
CHAOS_TEST_DURATION ?= 2m
#? make bench-go: the -bench pattern
BENCH        ?= .
#? make bench-go: -benchtime of each benchmark
BENCHTIME    ?= 2s
#? make bench-go: -count (repetitions of each benchmark)
BENCH_COUNT  ?= 1
#? make bench, bench-go: the log file (machine header, baseline, progress)
BENCH_OUT    ?= bench.txt
# Fuzzing: each target runs FUZZTIME with FUZZ_PARALLEL workers; FUZZ_ONLY
# (a regular expression) picks targets by name.
#? make fuzz: how long each fuzz target runs
FUZZTIME      ?= 30s
#? make fuzz: workers per fuzz target (-parallel)
FUZZ_PARALLEL ?= 2
#? make fuzz: regular expression picking fuzz targets by name (empty: all)
FUZZ_ONLY     ?=
# staticcheck 2026.2.2 (module version v0.8.2); its go.mod requires Go 1.26.
#? make lint: the staticcheck module version go run fetches
STATICCHECK_VERSION ?= v0.8.2
# stripe-mock, Stripe's official mock server, judges every request of the Stripe
# adapter in provider/stripe's contract tests; test and test-short install this
# version with go install when no stripe-mock of it is on PATH or in GOBIN, and
# pass its path in BOOKING_TEST_STRIPE_MOCK.
#? make test, test-short: the stripe-mock version go install fetches for provider/stripe's contract tests
STRIPE_MOCK_VERSION ?= v0.203.0

# Development server (`make run`, `make migrate`). DATABASE_URL, when set, is used
# instead of the local PostgreSQL in $(PG_DATA).
#? make run, migrate, pg-up, pg-down, psql, clean-data: the local PostgreSQL data directory
PG_DATA            ?= .data/pg
#? make run, migrate, pg-up, psql: the local PostgreSQL port
PG_PORT            ?= 5433
#? make run: the service's data directory (clean-data deletes it)
BOOKING_DATA_DIR   ?= .data
#? make run: the API's listen address (host:port)
BOOKING_HTTP_ADDR  ?= 127.0.0.1:8080
#? make run: the admin listener's address (/metrics, /debug/pprof/; empty: none)
BOOKING_ADMIN_ADDR ?= 127.0.0.1:9091
#? make run: the embedded NATS server's listen address (host:port)
BOOKING_NATS_ADDR  ?= 127.0.0.1:4222
#? make run: the in-process provider simulator's listen address (host:port)
BOOKING_PROVIDER_SIM_ADDR ?= 127.0.0.1:8090
#? make run: the dev bearer tokens (name=token[:admin], comma-separated)
BOOKING_API_TOKENS ?= alice=dev-alice-token,bob=dev-bob-token,admin=dev-admin-token:admin
#? make run: the payment webhooks' signing secret (the dev default)
BOOKING_PROVIDER_WEBHOOK_SECRET ?= whsec_dev

comma := ,
# Base URL and admin token for the hints `make run` prints.
API_URL     = http://$(patsubst 0.0.0.0:%,127.0.0.1:%,$(patsubst :%,127.0.0.1:%,$(BOOKING_HTTP_ADDR)))
NATS_URL    = $(or $(BOOKING_NATS_URL),nats://$(patsubst 0.0.0.0:%,127.0.0.1:%,$(patsubst :%,127.0.0.1:%,$(BOOKING_NATS_ADDR))))
token_list  = $(subst $(comma), ,$(BOOKING_API_TOKENS))
ADMIN_TOKEN = $(or $(lastword $(subst =, ,$(patsubst %:admin,%,$(firstword $(filter %:admin,$(token_list)))))),ADMIN-TOKEN)
USER_TOKEN  = $(or $(lastword $(subst =, ,$(firstword $(filter-out %:admin,$(token_list))))),$(ADMIN_TOKEN))

# Shell snippet: export DATABASE_URL, starting the local PostgreSQL unless it is set.
define use_dev_db
if [[ -z "$${DATABASE_URL:-}" ]]; then \
	DATABASE_URL="$$($(PG_SH) dev-up '$(PG_DATA)' '$(PG_PORT)')"; \
else \
	echo "using DATABASE_URL from the environment" >&2; \
fi; \
export DATABASE_URL
endef

# Shell snippet: export BOOKING_TEST_STRIPE_MOCK, installing stripe-mock if missing.
# If that fails, the contract tests say so: skipped, or failed under CI=true.
define use_stripe_mock
BOOKING_TEST_STRIPE_MOCK="$$(GO='$(GO)' $(STRIPE_MOCK_SH) '$(STRIPE_MOCK_VERSION)')" || BOOKING_TEST_STRIPE_MOCK=; \
export BOOKING_TEST_STRIPE_MOCK
endef

# With BOOKING_AUTH=jwt the static tokens are off: the hints name a JWT instead.
jwt_mode     = $(filter jwt,$(BOOKING_AUTH))
BANNER_ADMIN = $(if $(jwt_mode),<an admin JWT>,$(ADMIN_TOKEN))
BANNER_USER  = $(if $(jwt_mode),<a JWT>,$(USER_TOKEN))
# The example show starts in 30 days (GNU date), so the hint never goes stale.
BANNER_START = $(shell date -u -d '+30 days' +%Y-%m-%dT20:00:00Z 2>/dev/null || echo 2030-06-01T20:00:00Z)

define RUN_BANNER
booking API  $(API_URL)
dev tokens   $(if $(jwt_mode),none: BOOKING_AUTH=jwt takes JWTs of your identity provider (docs/identity.md),$(subst $(comma),  ,$(BOOKING_API_TOKENS)))
try          curl -sS -X POST $(API_URL)/v1/shows -H 'Authorization: Bearer $(BANNER_ADMIN)' -H 'Idempotency-Key: show-1' -H 'Content-Type: application/json' -d '{"name":"Concert","starts_at":"$(BANNER_START)","capacity":100,"price":{"amount":4500,"currency":"EUR"}}'
             (send it again: same show, header Idempotent-Replayed: true; add -i to see headers)
then         curl -sS $(API_URL)/v1/shows -H 'Authorization: Bearer $(BANNER_USER)'
nats         $(NATS_URL)  (watch: BOOKING_NATS_URL=$(NATS_URL) DATABASE_URL=<the database above> bin/booking notifications tail)
provider     $(if $(BOOKING_PROVIDER_URL)$(BOOKING_STRIPE_SECRET_KEY),BOOKING_PROVIDER_URL or a Stripe key is set: no simulator,the simulator at http://$(patsubst 0.0.0.0:%,127.0.0.1:%,$(patsubst :%,127.0.0.1:%,$(BOOKING_PROVIDER_SIM_ADDR))))
metrics      $(if $(BOOKING_ADMIN_ADDR),curl -sS http://$(patsubst 0.0.0.0:%,127.0.0.1:%,$(patsubst :%,127.0.0.1:%,$(BOOKING_ADMIN_ADDR)))/metrics  (the admin listener; never on the API's port),none (BOOKING_ADMIN_ADDR is empty))
stop         Ctrl-C; `make pg-down` stops PostgreSQL, `make clean-data` deletes $(BOOKING_DATA_DIR)

endef

##@ Development

.PHONY: help
# `make help` lists every target with a `## ` description and every variable whose
# assignment has a `#? ` line just above it (one line each), with the value in
# effect; a new variable a target reads gets such a line (cmd/booking's
# TestMakeHelpListsEveryVariable checks that every `?=` variable has one).
help_vars = $(shell awk '/^\#\? /{d = 1; next} d && /^[A-Za-z_][A-Za-z0-9_]* *[?:+]?=/{print $$1} {d = 0}' $(MAKEFILE_LIST))
shell_quote = '$(subst ','\'',$(1))'
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} \
		/^##@/ {printf "\n%s\n", substr($$0, 5); next} \
		/^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@printf '\nVariables (make VAR=value; the value in effect in brackets)\n'
	@$(foreach v,$(help_vars),HELP_VALUE_$(v)=$(call shell_quote,$($(v)))) awk ' \
		/^#\? / {d = substr($$0, 4); next} \
		d != "" && match($$0, /^[A-Za-z_][A-Za-z0-9_]*/) { \
			n = substr($$0, 1, RLENGTH); printf "  %-31s %s [%s]\n", n, d, ENVIRON["HELP_VALUE_" n]} \
		{d = ""}' $(MAKEFILE_LIST)
	@printf '  %-31s %s [%s]\n' \
		GOFLAGS 'from the environment: passed on to every go command' "$${GOFLAGS:-}" \
		DATABASE_URL 'from the environment: make run and migrate use it instead of the local PostgreSQL' "$${DATABASE_URL:-}"

.PHONY: run
run: export RUN_BANNER := $(RUN_BANNER)
run: build ## Run the service from nothing: local PostgreSQL (.data/pg), migrate, `booking serve` in dev mode
	@$(use_dev_db); \
	export BOOKING_DATA_DIR='$(BOOKING_DATA_DIR)' BOOKING_HTTP_ADDR='$(BOOKING_HTTP_ADDR)' BOOKING_ADMIN_ADDR='$(BOOKING_ADMIN_ADDR)' \
		BOOKING_NATS_ADDR='$(BOOKING_NATS_ADDR)' BOOKING_PROVIDER_SIM_ADDR='$(BOOKING_PROVIDER_SIM_ADDR)' \
		BOOKING_API_TOKENS='$(BOOKING_API_TOKENS)' \
		BOOKING_PROVIDER_WEBHOOK_SECRET='$(BOOKING_PROVIDER_WEBHOOK_SECRET)'; \
	$(BIN) migrate; \
	banner="$$(printf '\ndatabase     %s\n%s' "$$DATABASE_URL" "$$RUN_BANNER")"; unset RUN_BANNER; \
	exec $(BIN) serve > >(trap '' INT TERM; while IFS= read -r line; do \
		printf '%s\n' "$$line"; \
		if [[ $$line == 'booking: listening on '* ]]; then printf '%s\n' "$$banner"; fi; \
	done)

.PHONY: build
build: ## Build bin/booking (with the work tree's revision: booking --version)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/booking

.PHONY: migrate
migrate: build ## Apply migrations to DATABASE_URL (default: the local PostgreSQL of `make run`)
	@$(use_dev_db); $(BIN) migrate

.PHONY: pg-up
pg-up: ## Start the local PostgreSQL of `make run` and print its DATABASE_URL
	@$(PG_SH) dev-up '$(PG_DATA)' '$(PG_PORT)'

.PHONY: pg-down
pg-down: ## Stop the local PostgreSQL of `make run`
	@$(PG_SH) dev-down '$(PG_DATA)'

.PHONY: psql
psql: ## Open psql on the local database of `make run`
	@url="$$($(PG_SH) dev-up '$(PG_DATA)' '$(PG_PORT)')"; exec "$$($(PG_SH) bindir)/psql" "$$url"

##@ Checks

.PHONY: test
# Tests that stop the shared PostgreSQL server (TestOutage_*) run alone, after all
# packages have run in parallel, so they cannot disturb other packages' tests; so does
# the whole-service statement budget (TestStatementBudget_*, about 1–2 min), whose
# count includes the workers' idle polls and would grow on a machine slowed by the
# parallel phase. Each
# phase gets its own throwaway server. The third phase is `make test-alerts`, the
# fourth `make test-kurrentdb` (the end-to-end scenarios on KurrentDB), the fifth a
# short `make chaos` (CHAOS_TEST_DURATION) on its own server. All
# phases always run, every result is printed, and the target fails if any failed (an
# interrupt stops it at once).
EXCLUSIVE_TESTS := ^(TestOutage_|TestStatementBudget_)
# The end-to-end scenarios `make test-kurrentdb` runs with booking serve on
# KurrentDB (the server double as its own process per test, see
# test/backend_test.go): order flow, repeats and 20 concurrent duplicates,
# 422, 409, decline, SIGKILL recovery, payments with webhooks, an abandoned
# requires_action cancelled at the deadline, intent retention, rebuild equals
# live with the relay publishing once per event, and the KurrentDB faults
# (restart, server not up at start). The double runs three nodes and the
# harness stops its leader once during each scenario that does not stop the
# double itself (test/backend_test.go, electMidRun).
KURRENTDB_TESTS := ^(TestOrder_ConfirmedWithOneTicketPerSeat|TestOrder_RepeatReturnsSameOrder|TestOrder_TwentyConcurrentIdenticalRequestsMakeOneOrder|TestOrder_SameKeyDifferentBodyIsRefused|TestOrder_NewKeyForOrderedReservationIsConflict|TestOrder_DeclinedPaymentFailsOrderAndReleasesSeats|TestOrder_KilledAfterClaimIsFinishedWithoutRepeat|TestPayment_WebhooksEarlyDuplicatedLateAndReorderedConfirmOnce|TestPayment_RequiresActionAbandonedIsCancelledAtTheDeadline|TestRetention_KeyAfterExpiryIsNewIntentStillRefusedSecondOrder|TestRebuild_EqualsLiveTwiceAndTouchesNoProviderOrNATS|TestErasure_RecordedOnceAlsoAfterAKillBetweenDeleteAndRecord|TestKurrentDB_.*)$$

test: ## Run all tests with -race against a throwaway PostgreSQL (the README's test command), then the alert rules' and OpenAPI checks, the KurrentDB scenarios and a short chaos run
	@rc1=0; rc2=0; rc3=0; rc4=0; rc5=0; t_all=$$SECONDS; \
	phase_start() { t_phase=$$SECONDS; echo "==> make test: phase $$1 of 5 (at +$$((SECONDS - t_all))s): $$2"; }; \
	phase_end() { local d=$$((SECONDS - t_phase)); eval "d$$1=$$d"; echo "<== make test: phase $$1 took $${d}s (exit $$2)"; \
		if (($$2 == 130 || $$2 == 143)); then echo "make test: interrupted (exit $$2)"; exit "$$2"; fi; }; \
	phase_start 1 "all packages in parallel, $(EXCLUSIVE_TESTS) skipped"; \
	$(use_stripe_mock); \
	$(PG_SH) throwaway -- $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) -skip '$(EXCLUSIVE_TESTS)' $(TEST_ARGS) $(PKG) || rc1=$$?; \
	phase_end 1 "$$rc1"; \
	phase_start 2 "$(EXCLUSIVE_TESTS) alone (outages stop the PostgreSQL server; the statement budget counts idle polls)"; \
	BOOKING_TEST_PG_EXCLUSIVE=1 $(PG_SH) throwaway -- $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -run '$(EXCLUSIVE_TESTS)' $(TEST_ARGS) ./test/ || rc2=$$?; \
	phase_end 2 "$$rc2"; \
	phase_start 3 "alert rules and Prometheus configuration (promtool), OpenAPI lint (libopenapi)"; \
	$(MAKE) test-alerts || rc3=$$?; \
	$(MAKE) lint-openapi || rc3=$$?; \
	phase_end 3 "$$rc3"; \
	phase_start 4 "end-to-end scenarios on KurrentDB (make test-kurrentdb)"; \
	$(MAKE) test-kurrentdb || rc4=$$?; \
	phase_end 4 "$$rc4"; \
	phase_start 5 "chaos run of $(CHAOS_TEST_DURATION) on its own PostgreSQL server (make chaos)"; \
	$(MAKE) chaos DURATION='$(CHAOS_TEST_DURATION)' || rc5=$$?; \
	phase_end 5 "$$rc5"; \
	result() { if (($$1 == 0)); then echo "PASS in $${2}s"; else echo "FAIL (exit $$1) in $${2}s"; fi; }; \
	echo "==> make test: phase 1 (all packages): $$(result $$rc1 $$d1)"; \
	echo "==> make test: phase 2 ($(EXCLUSIVE_TESTS)):  $$(result $$rc2 $$d2)"; \
	echo "==> make test: phase 3 (alert rules, OpenAPI lint):  $$(result $$rc3 $$d3)"; \
	echo "==> make test: phase 4 (KurrentDB):    $$(result $$rc4 $$d4)"; \
	echo "==> make test: phase 5 (chaos $(CHAOS_TEST_DURATION)):  $$(result $$rc5 $$d5)"; \
	echo "==> make test: all phases took $$((SECONDS - t_all))s"; \
	for rc in "$$rc1" "$$rc2" "$$rc3" "$$rc4" "$$rc5"; do if ((rc != 0)); then exit "$$rc"; fi; done

.PHONY: chaos
chaos: build ## Two replicas, external NATS and simulator under load, kills, pauses and a PostgreSQL restart for DURATION, then the audit (fails on a violation and on an inconclusive run)
	@ns="$$(command -v nats-server || true)"; \
	if [[ -z "$$ns" ]]; then \
		if [[ ! -x bin/nats-server ]]; then echo "==> make chaos: building bin/nats-server from the module in go.mod"; \
			$(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2; fi; \
		ns=bin/nats-server; \
	fi; \
	$(GO) build -o bin/chaos ./test/chaos; \
	$(PG_SH) throwaway -- bin/chaos --duration '$(DURATION)' --bin $(BIN) --nats-server "$$ns" $(CHAOS_ARGS)

.PHONY: test-alerts
test-alerts: ## Check deploy/prometheus and run the alert rules' unit tests (promtool, unpacked into bin/ if missing)
	$(PROMTOOL) check config deploy/prometheus/prometheus.yml
	$(PROMTOOL) test rules deploy/prometheus/alerts_test.yml

.PHONY: test-kurrentdb
test-kurrentdb: ## Run the end-to-end scenarios with booking serve on KurrentDB (a three-node cluster double as its own process; its leader is stopped once mid-test)
	BOOKING_TEST_BACKEND=kurrentdb BOOKING_TEST_KURRENTDB_NODES=3 BOOKING_TEST_KURRENTDB_ELECTION=1 $(PG_SH) throwaway -- $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) \
		-run '$(KURRENTDB_TESTS)' $(TEST_ARGS) ./test/
	@echo "==> make test-kurrentdb: the statement budget with the log on KurrentDB, alone (it counts idle polls)"
	BOOKING_TEST_BACKEND=kurrentdb $(PG_SH) throwaway -- $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) \
		-run '^TestStatementBudget_WholeService$$' $(TEST_ARGS) ./test/

.PHONY: lint-openapi
lint-openapi: ## Lint cmd/booking/internal/httpapi/openapi.yaml: OpenAPI 3.1 meta-schema, references, a linter's recommended rules (libopenapi; Go only)
	$(GO) test -count=1 -run '^TestOpenAPI' ./cmd/booking/internal/httpapi/

.PHONY: test-stress
test-stress: ## Run `make test` STRESS_RUNS times while a CPU hog keeps every core busy; stop at the first failure
	@$(GO) build -o bin/cpuhog ./test/cpuhog; \
	for ((run = 1; run <= $(STRESS_RUNS); run++)); do \
		echo "==> make test-stress: run $$run of $(STRESS_RUNS) (CPU hog on every core)"; \
		rc=0; bin/cpuhog -- $(MAKE) test || rc=$$?; \
		if ((rc != 0)); then echo "==> make test-stress: run $$run of $(STRESS_RUNS) FAILED (exit $$rc)"; exit "$$rc"; fi; \
		echo "==> make test-stress: run $$run of $(STRESS_RUNS) passed"; \
	done; \
	echo "==> make test-stress: all $(STRESS_RUNS) run(s) passed"

.PHONY: test-short
test-short: ## Like test, with -short (skips the slow end-to-end scenarios)
	@echo "==> make test-short: go test -race -short; results print package by package, the end-to-end package (test) after several minutes"; \
	$(use_stripe_mock); \
	$(PG_SH) throwaway -- $(GO) test -race -short -count=1 -timeout $(TEST_TIMEOUT) $(TEST_ARGS) $(or $(filter-out ./test/,$(PKG)),./test/)

.PHONY: fuzz
fuzz: ## Run every fuzz target (test/scripts/fuzz.sh list) for FUZZTIME each, one after the other
	FUZZ_ONLY='$(FUZZ_ONLY)' test/scripts/fuzz.sh run '$(FUZZTIME)' -parallel '$(FUZZ_PARALLEL)'

.PHONY: lint
lint: ## gofmt check, go vet and a pinned staticcheck
	@unformatted="$$(find . -type d \( -name .git -o -name .data -o -name .tmp -o -name bin \) -prune \
		-o -name '*.go' -print0 | xargs -0 -r gofmt -l)"; \
	if [[ -n "$$unformatted" ]]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# make bench: the performance table P1–P7 (test/scripts/benchrun), every row
# against its baseline measured in the same run, written to BENCHMARKS.md;
# the log (machine header, pgbench baseline, progress) goes to BENCH_OUT.
# BENCH_QUICK=1 runs one short repetition of each row (a smoke pass, a few
# minutes); BENCH_ONLY picks rows by id (a regular expression: 'P2|P2h').
#? make bench: 1 runs one short repetition of each row (a smoke pass of a few minutes)
BENCH_QUICK  ?=
#? make bench: regular expression picking rows by id ('P2|P2h'; empty: all)
BENCH_ONLY   ?=
#? make bench: the Markdown file the table is written to
BENCH_REPORT ?= BENCHMARKS.md
#? make bench: directory for CPU profiles of booking serve, one per timed HTTP window (empty: none)
BENCH_PROFILE_DIR ?=

.PHONY: bench
bench: build ## Run the performance table P1–P7 against its baselines on a throwaway PostgreSQL; write BENCHMARKS.md (BENCH_QUICK=1: quick pass)
	@ns="$$(command -v nats-server || true)"; \
	if [[ -z "$$ns" ]]; then \
		if [[ ! -x bin/nats-server ]]; then echo "==> make bench: building bin/nats-server from the module in go.mod"; \
			$(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2; fi; \
		ns=bin/nats-server; \
	fi; \
	BENCH_QUICK='$(BENCH_QUICK)' BENCH_BASELINE_CLIENTS=32 $(PG_SH) throwaway -- test/scripts/bench.sh '$(BENCH_OUT)' -- \
		$(GO) run ./test/scripts/benchrun --out '$(BENCH_REPORT)' --bin $(BIN) --nats-server "$$ns" --only '$(BENCH_ONLY)' --profile-dir '$(BENCH_PROFILE_DIR)'

.PHONY: bench-go
bench-go: ## Run Go benchmarks (BENCH, PKG, BENCHTIME, BENCH_COUNT) against a throwaway PostgreSQL; report in BENCH_OUT
	$(PG_SH) throwaway -- test/scripts/bench.sh '$(BENCH_OUT)' -- \
		$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -benchmem \
		-count $(BENCH_COUNT) -timeout 60m $(TEST_ARGS) $(PKG)

##@ Housekeeping

.PHONY: clean
clean: ## Remove build outputs and benchmark reports (keeps .data)
	rm -rf bin '$(BENCH_OUT)' '$(BENCH_OUT).tmp' '$(BENCH_OUT).failed'

.PHONY: clean-data
clean-data: pg-down ## Stop the local PostgreSQL and delete .data (all local data)
	rm -rf '$(BOOKING_DATA_DIR)' '$(PG_DATA)'
