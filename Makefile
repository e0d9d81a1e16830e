# redis-lock: `make run` builds the module and starts Redis with it loaded;
# `make test` runs every test. Both install missing prerequisites first.

PORT ?= 6379
MODULE := target/release/libredis_lock.so
CARGO ?= cargo

.PHONY: prereqs build run test unit integration lint fmt clean cluster cluster-stop demo

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

test: build
	$(CARGO) test --release --workspace

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --workspace -- -D warnings

fmt:
	$(CARGO) fmt --all

cluster: build
	scripts/cluster.sh start

cluster-stop:
	scripts/cluster.sh stop

demo: build
	$(CARGO) run --release -p redis-lock-client --example demo

clean:
	$(CARGO) clean
	rm -rf .redis-run .redis-cluster
