# hullguard: every entry point a developer or CI uses. `make test` is the CI command (.ci/run).
#
#   make demo     the isolation demo on real local HTTP traffic (DESIGN.md §9)
#   make test     set-up, then every test: fmt, clippy, unit/integration/doc, loom, Miri, no_std
#   make bench    the benchmarks (DESIGN.md §8)

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Bare-metal targets of the no_std build (ci/no-std.sh).
NO_STD_TARGETS := thumbv7em-none-eabihf thumbv6m-none-eabi
# The machine's preinstalled nightly, for Miri only. Never install another toolchain.
NIGHTLY := nightly

.PHONY: help setup fmt-check clippy unit loom miri nostd test demo bench

help:
	@echo "make demo       run the isolation demo (two local HTTP upstreams, without/with hullguard)"
	@echo "make test       set up what is missing, then run every test"
	@echo "make setup      install the no_std targets and nightly's miri + rust-src (idempotent)"
	@echo "make fmt-check | clippy | unit | loom | miri | nostd    one test layer"
	@echo "make bench      the benchmarks"

# Idempotent and quiet when everything is already there: rustup is only called for what is
# missing.
setup:
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

# Unit, integration and doc tests of every crate.
unit:
	cargo test --workspace

loom:
	ci/loom.sh

miri:
	ci/miri.sh

nostd:
	ci/no-std.sh

test: setup fmt-check clippy unit loom miri nostd

demo:
	cargo run --release -p hullguard-examples --example isolation_demo

bench:
	@echo "bench: the benchmarks arrive with the benchmark issue (DESIGN.md §8); nothing to run yet."
