# hullguard: every entry point a developer or CI uses. `make test` is the CI command (.ci/run).
#
#   make demo     the isolation demo on real local HTTP traffic (docs/design.md §13), its HTML
#                 report target/demo-report.html and its render target/demo-report.png
#   make test     set-up, then every test ($(TEST_TARGETS), with $(TEST_LANE) beside them; timed per target by ci/timed.sh)
#   make bench    the benchmarks (docs/design.md §12)

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Where cargo puts its output (CARGO_TARGET_DIR when set).
CARGO_OUT := $(or $(CARGO_TARGET_DIR),target)

# Bare-metal targets of the no_std build (ci/no-std.sh).
NO_STD_TARGETS := thumbv7em-none-eabihf thumbv6m-none-eabi
# The machine's preinstalled nightly, for Miri and cargo-fuzz only. Never install another toolchain.
NIGHTLY := nightly

.PHONY: help setup chromium redis hiredis fmt-check clippy layers unit host-test host-mixed fleet-mixed loom-host stress soak soak-deep loom loom-deep miri nostd test demo demo-rust bench \
	bench-smoke py-dev py-test py-wheel node-build node-test demo-node header header-check readme dist \
	dist-test fleet-test

# The Python binding builds into its own venv and target dir (no rebuild ping-pong with cargo).
VENV := .venv
PY := $(VENV)/bin/python
PY_TARGET := target/python
MATURIN := env CARGO_TARGET_DIR=$(abspath $(PY_TARGET)) VIRTUAL_ENV=$(abspath $(VENV)) \
	PATH=$(abspath $(VENV))/bin:$$PATH $(abspath $(VENV))/bin/maturin

help:
	@echo "make demo       run the isolation demo (two local HTTP upstreams, without/with hullguard)"
	@echo "make demo-host  one limit per host: 4 worker processes, per-process vs host-wide, a SIGKILL"
	@echo "make demo-fleet one limit per fleet: 3 hosts on one Redis pool, shares, a killed host, Redis restarted"
	@echo "make test       set up what is missing, then run every test"
	@echo "make setup      install the no_std targets, nightly's miri + rust-src, chromium and redis-server (idempotent)"
	@echo "make report-test  the demo's HTML report: structure + headless Chromium render"
	@echo "make fmt-check | clippy | unit | host-test | fleet-test | loom | miri | nostd    one test layer"
	@echo "make loom-deep  the capped three-thread loom models one preemption deeper (slow)"
	@echo "make soak       the all-layers soak (SOAK_SECONDS, default 180), then the stress tests at 10^6 ops"
	@echo "make soak-deep  make loom-deep (slow: minutes to hours)"
	@echo "make bench      the benchmarks"

# Debian's chromium, for the demo report's headless render (make demo, make report-test), only
# when missing.
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# Debian's redis-server and redis-cli (7.0 on bookworm), for the fleet bulkhead's tests, bench
# and demo (they start their own servers on free loopback ports), only when missing.
redis:
	@command -v redis-server >/dev/null && command -v redis-cli >/dev/null || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools; }

# Debian's hiredis headers and library, only for the C tests' transport of the fleet bulkhead
# (tests/c/fleet.c: libhullguard itself links no Redis client), only when missing.
hiredis:
	@echo '#include <hiredis/hiredis.h>' | $(CC) -E -x c - >/dev/null 2>&1 || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libhiredis-dev; }

# Idempotent and quiet when everything is already there: rustup is only called for what is
# missing.
setup: chromium redis hiredis
	@installed="$$(rustup component list --installed)"; \
	missing=""; \
	for c in rustfmt clippy; do \
	    grep -q "^$$c" <<<"$$installed" || missing="$$missing $$c"; \
	done; \
	if [ -n "$$missing" ]; then rustup component add $$missing; fi
	@installed="$$(rustup target list --installed)"; \
	for t in $(NO_STD_TARGETS); do \
	    grep -qx "$$t" <<<"$$installed" || rustup target add "$$t"; \
	done
	@if ! grep -q '^$(NIGHTLY)' <<<"$$(rustup toolchain list)"; then \
	    echo "setup: the preinstalled '$(NIGHTLY)' toolchain is missing (needed for Miri)" >&2; \
	    exit 1; \
	fi
	@installed="$$(rustup component list --toolchain $(NIGHTLY) --installed)"; \
	missing=""; \
	for c in miri rust-src; do \
	    grep -q "^$$c" <<<"$$installed" || missing="$$missing $$c"; \
	done; \
	if [ -n "$$missing" ]; then rustup component add --toolchain $(NIGHTLY) $$missing; fi

fmt-check:
	cargo fmt --all -- --check

clippy:
	cargo clippy --workspace --all-targets -- -D warnings

# Unit, integration and doc tests of every crate (the host crate's in `host-test`, the fleet
# crate's in `fleet-test`).
unit:
	cargo test --workspace --exclude hullguard-host --exclude hullguard-fleet

# The fleet bulkhead (docs/design.md §16) against real redis-server processes the tests start
# on free loopback ports (one node, a 3-node cluster, an oracle): the Lua library, the lease
# manager in virtual time, C42, fair shares among 2/3/5 processes, SIGKILL, SIGSTOP, Redis
# killed and restarted, FLUSHALL.
fleet-test: redis
	cargo test -p hullguard-fleet

# The host bulkhead (docs/design.md §14): unit, property and real-process tests, with the
# crash hook on (a child aborted at every named protocol step; never in a shipped build). In
# release: the property tests are most of the time in debug.
host-test:
	cargo test --release -p hullguard-host --features crash-hook

# 8 threads, 2*10^5 random operations per test, in release; asserts invariants, never time.
stress:
	cargo test --release -p hullguard-tests --test stress

# The long runs (not in make test). `make soak`: the all-layers soak (examples/soak.py: Python,
# Node and C, the host and the fleet bulkheads at once against the demo's HTTP upstreams, with
# random cancellations, timeouts, limit changes and breaker trips; RSS and the core's counters
# sampled, invariants checked, the RSS slope gated; SOAK_SECONDS long, default 180), then the
# stress tests at 10^6 operations each. `make soak-deep`: the capped loom models one preemption
# deeper (minutes to hours).
SOAK_SECONDS ?= 180
soak: py-dev node-build redis
	$(PY) examples/soak.py --seconds $(SOAK_SECONDS)
	HULLGUARD_STRESS_OPS=125000 cargo test --release -p hullguard-tests --test stress
	cd bindings-python && HULLGUARD_PROPS=long ../$(PY) -m pytest -q -p no:cacheprovider tests/test_properties.py
	cd bindings-node && HULLGUARD_PROPS=long node --expose-gc --test __test__/properties.test.js

soak-deep: loom-deep

loom:
	ci/loom.sh

# The host bulkhead across languages (host/tests/mixed.rs): 3 Rust, 3 Python and 2 Node worker
# processes on one limit, random operations, a chaos killer every 200 ms, an oracle server
# checking in flight <= limit on every grant.
host-mixed: py-dev node-build
	HG_MIXED_PYTHON=$(abspath $(VENV))/bin/python HG_MIXED_NODE=$(abspath bindings-node) \
	    cargo test --release -p hullguard-host --features crash-hook --test mixed -- --ignored --nocapture

# The fleet bulkhead across languages (fleet/tests/mixed.rs): Rust, Python and Node worker
# processes (2, 3 and 5, each busy) on one pool of a real redis-server, an oracle redis-server
# counting calls in flight: fair shares, in flight <= limit, every block given back at the end.
fleet-mixed: py-dev node-build redis
	HG_MIXED_PYTHON=$(abspath $(VENV))/bin/python HG_MIXED_NODE=$(abspath bindings-node) \
	    cargo test -p hullguard-fleet --test mixed -- --ignored --nocapture

# The host bulkhead's loom models (docs/design.md §14.7): the ledger, reclaim and expiry against
# the owner, tickets and doorbells, crash injection at every named step (about a minute).
loom-host:
	ci/loom-host.sh

# The capped three-thread loom models one preemption deeper (minutes to hours; not in make test).
loom-deep:
	LOOM_DEEP=1 ci/loom.sh
	LOOM_DEEP=1 ci/loom-host.sh

miri:
	ci/miri.sh

nostd:
	ci/no-std.sh

# Every test, each target timed (ci/timed.sh prints the table at the end). Heavy modes have their
# own targets: `make bench` (real figures), `make demo`. TEST_LANE runs beside the main targets,
# once setup has passed: the loom models keep about one core busy for most of their run, so the
# other core runs the main targets meanwhile (ci/timed.sh). The main targets that keep both cores
# busy (py-test, miri, bench-smoke: measured 1.3, 2.4 and 1.3 cores) come last, when the lane has
# mostly finished. A lane target must not share a make prerequisite that builds (py-dev,
# node-build) with the main targets: two makes would build it at once.
TEST_TARGETS := setup fmt-check clippy layers header-check unit host-test fleet-test stress nostd firmware \
	c-test node-test report-test host-mixed fleet-mixed readme dist-test py-test miri bench-smoke
TEST_LANE := loom loom-host fuzz-smoke

# In the lane the fuzz smoke runs one target at a time (one core, as the loom models).
test:
	HG_LANE="$(TEST_LANE)" FUZZ_JOBS=1 ci/timed.sh $(TEST_TARGETS)

# The core's layer map: dependencies point down, no import cycles (ci/layers.py).
layers:
	python3 ci/layers.py

# Every bench script end to end in its smoke mode (seconds; no figures, no timing asserted).
bench-smoke: py-dev node-build redis
	bench/smoke.sh

# The main job: the isolation demo in Python (httpx, a shared connection budget).
demo: py-dev chromium
	$(PY) examples/isolation_demo.py
	python3 ci/report_check.py target/demo-report.html --png target/demo-report.png

# One limit per host (docs/design.md §14, also a phase of `make demo`): 4 worker processes send
# to a degraded origin through per-process bulkheads (the limit multiplied), then through one
# HostBulkhead, and a worker is SIGKILLed mid-run (its permits reclaimed).
.PHONY: demo-host
demo-host: py-dev
	$(PY) examples/host_demo.py

# One limit per fleet (docs/design.md §16): 3 "hosts" (process groups of 2 workers) share one
# FleetBulkhead pool on a redis-server the demo starts; demand shifts, a host is SIGKILLed (its
# blocks reaped after the TTL), Redis is killed and restarted empty (learning).
.PHONY: demo-fleet
demo-fleet: py-dev redis
	$(PY) examples/fleet_demo.py

# The demo's HTML report (examples/report.py, docs/design.md §13): a deterministic synthetic
# recording of every phase through the demo's own report code, checked for structure and
# rendered by headless Chromium (ci/report_check.py) to target/report-sample.png. (A real run's
# report is checked for structure by tests/test_demo.py; `make demo` renders its own.)
.PHONY: report-test
report-test: py-dev chromium
	mkdir -p target
	$(PY) examples/report.py --sample target/report-sample.html
	python3 ci/report_check.py target/report-sample.html --strict-series \
	    --png target/report-sample.png

demo-rust:
	cargo run --release -p hullguard-examples --example isolation_demo

# A venv with the build/test tools and the extension installed in development mode.
$(VENV)/bin/maturin: bindings-python/requirements-dev.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r bindings-python/requirements-dev.txt
	touch $@

py-dev: $(VENV)/bin/maturin
	cd bindings-python && $(MATURIN) develop --release --quiet

# pytest (warnings are errors; two workers, a file's tests in one), stubtest on the native module,
# then the wheel in a fresh venv.
py-test: redis py-dev
	cd bindings-python && ../$(PY) -m pytest -q -n 2 --dist loadfile
	cd bindings-python && ../$(PY) -m mypy.stubtest hullguard._native --allowlist stubtest-allowlist.txt
	$(MAKE) --no-print-directory py-wheel

py-wheel: $(VENV)/bin/maturin
	rm -rf target/wheels target/wheel-venv
	cd bindings-python && $(MATURIN) build --release --quiet --out ../target/wheels
	python3 -m venv target/wheel-venv
	target/wheel-venv/bin/pip install --quiet target/wheels/hullguard-*.whl
	cd /tmp && $(abspath target/wheel-venv)/bin/python -c "import hullguard, asyncio; \
	bh = hullguard.Bulkhead(max_concurrent=1); p = bh.try_acquire(); assert p is not None; \
	assert bh.try_acquire() is None; p.release(); \
	print('wheel OK:', hullguard.__version__, hullguard.origin_key('https://Example.com'))"

bench: redis
	cargo bench -p hullguard-bench --bench engine
	cargo run --release --quiet -p hullguard-bench --bin ratios
	cargo run --release --quiet -p hullguard-bench --bin host
	cargo run --release --quiet -p hullguard-bench --bin fleet
	bench/callgrind.sh
	$(MAKE) --no-print-directory py-dev
	$(VENV)/bin/pip install --quiet -r bench/python/requirements.txt
	$(PY) bench/python/bench.py
	$(MAKE) --no-print-directory node-build
	cd bench/node && npm ci --no-audit --no-fund --loglevel=error && node --expose-gc bench.mjs
	bench/c/run.sh

# ----- Node binding (bindings-node/, npm package `hullguard`) ----------------------------------

bindings-node/node_modules/.package-lock.json: bindings-node/package.json bindings-node/package-lock.json
	cd bindings-node && npm ci --no-audit --no-fund --loglevel=error

# `npm run build` = `napi build --platform --release --js native.js --dts native.d.ts`.
node-build: bindings-node/node_modules/.package-lock.json
	cd bindings-node && npm run --silent build

# After the rebuild: no drift in the generated native.d.ts / native.js (they must match the
# committed ones), the typed usage files against index.d.ts (with and without lib.dom), the
# node:test suites (`node --expose-gc --test __test__/`), then the `npm pack` tarball installed
# in a temp dir and loaded with require and import.
node-test: redis node-build
	bash bindings-node/scripts/check-drift.sh
	cd bindings-node && node_modules/.bin/tsc --noEmit -p types-check
	cd bindings-node && node_modules/.bin/tsc --noEmit -p types-check/tsconfig.bare.json
	cd bindings-node && npm test
	bash bindings-node/scripts/pack-check.sh

demo-node: node-build
	node examples/isolation_demo.mjs

# ----- C ABI (ffi/, header ffi/include/hullguard.h generated by a pinned cbindgen) ------------

header:
	ci/header.sh

header-check:
	ci/header.sh --check

# ----- C ABI tests / install / embedded --------------------------------------------------------
#
#   make c-test             the C ABI's tests (tests/c/run.sh): the C tests plain, under ASan +
#                           UBSan (leaks on) and valgrind; the C++17 example (examples/cpp), plain
#                           and under ASan; the scenario vectors through the ABI; and a C program
#                           built with pkg-config against `make install` in a temp prefix
#   make install PREFIX=... lib/libhullguard.{a,so}, include/hullguard.h, lib/pkgconfig/hullguard.pc
#                           (PREFIX defaults to /usr/local; DESTDIR is honoured)
#   make firmware           examples/firmware (no_std, a static bulkhead, no allocator): its host
#                           tests, then it and the core for thumbv6m-none-eabi (critical-section)
#                           and thumbv7em-none-eabihf, in their own target dir

PREFIX ?= /usr/local
HG_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
FIRMWARE_CARGO := env CARGO_TARGET_DIR=target/nostd cargo

.PHONY: c-test install firmware

c-test: redis hiredis
	tests/c/run.sh

# What a user installs, into dist/ (ci/dist.sh): the abi3 wheel, the npm package and its
# per-platform addon package, the C tarball; stripped (the `dist` profile).
dist: $(VENV)/bin/maturin bindings-node/node_modules/.package-lock.json
	bash ci/dist.sh

# Each artefact installed with cargo, rustc and rustup off PATH, and a smoke program run.
dist-test: dist
	bash ci/dist-check.sh

# The README's Python, Node and C snippets, run as written (ci/readme.py; Rust's are doc tests).
readme: py-dev node-build redis hiredis
	cargo build --quiet --release -p hullguard-ffi
	python3 ci/readme.py

install:
	cargo build --quiet --release -p hullguard-ffi
	install -d "$(DESTDIR)$(PREFIX)/lib/pkgconfig" "$(DESTDIR)$(PREFIX)/include"
	install -m 644 $(CARGO_OUT)/release/libhullguard.a "$(DESTDIR)$(PREFIX)/lib/"
	install -m 755 $(CARGO_OUT)/release/libhullguard.so "$(DESTDIR)$(PREFIX)/lib/libhullguard.so.$(HG_VERSION)"
	ln -sf "libhullguard.so.$(HG_VERSION)" "$(DESTDIR)$(PREFIX)/lib/libhullguard.so.0"
	ln -sf "libhullguard.so.0" "$(DESTDIR)$(PREFIX)/lib/libhullguard.so"
	install -m 644 ffi/include/hullguard.h "$(DESTDIR)$(PREFIX)/include/"
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(HG_VERSION)|g' ffi/hullguard.pc.in \
	    | grep -v '^#' > "$(DESTDIR)$(PREFIX)/lib/pkgconfig/hullguard.pc"

# A library build needs no critical-section implementation; a firmware binary must bring one.
firmware:
	$(FIRMWARE_CARGO) test --quiet -p hullguard-firmware-example
	$(FIRMWARE_CARGO) build -p hullguard-core --no-default-features --features critical-section \
	    --target thumbv6m-none-eabi
	$(FIRMWARE_CARGO) build -p hullguard-firmware-example --features critical-section \
	    --target thumbv6m-none-eabi
	$(FIRMWARE_CARGO) build -p hullguard-core --no-default-features --target thumbv7em-none-eabihf
	$(FIRMWARE_CARGO) build -p hullguard-firmware-example --target thumbv7em-none-eabihf

# ----- Fuzzing (fuzz/: cargo-fuzz targets, one per input boundary; docs/design.md §11) ---------
#
#   make fuzz        every target for 60 s (ci/fuzz.sh): runs, exec/s, coverage, corpus and
#                    crashes per target; non-zero on any crash, hang, leak or OOM
#   make fuzz-smoke  every target for 10 s, on a throwaway copy of the committed seed corpora
#   make cargo-fuzz  installs cargo-fuzz when `cargo fuzz` is missing (nightly's ASan build)
#
# The build and the full runs' growing corpora live in $(CARGO_OUT)/fuzz (FUZZ_TARGET_DIR);
# FUZZ_JOBS targets run at once (default: the CPUs).

.PHONY: cargo-fuzz fuzz fuzz-smoke

cargo-fuzz:
	@cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked

fuzz: cargo-fuzz
	NIGHTLY=$(NIGHTLY) ci/fuzz.sh

fuzz-smoke: cargo-fuzz
	NIGHTLY=$(NIGHTLY) ci/fuzz.sh --smoke
