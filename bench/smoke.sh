#!/usr/bin/env bash
# Every benchmark script of `make bench`, in the same order, in its smoke mode: each case and
# row runs once at tiny sizes through the same code and tables, so this proves in well under two
# minutes (once built) that every script runs end to end. Nothing is measured and nothing here
# asserts a time; any error (a crash, a missing table entry, a failed callgrind run) fails it.
# See bench/README.md § Smoke mode.
#
#   bench/smoke.sh        needs `make py-dev` and `make node-build` first (the Makefile target
#                         depends on them); installs the bench-only deps itself
#
# Every step is bounded (`timeout`, SMOKE_STEP_TIMEOUT seconds each, default 600: a cold release
# build of the Rust bench crate takes a few minutes on 2 cores, a warm step seconds). One line
# per step gives its wall time, and a summary of all of them closes the run. CARGO_TARGET_DIR is
# honoured (default: target/).
set -euo pipefail
cd "$(dirname "$0")/.."

STEP_TIMEOUT="${SMOKE_STEP_TIMEOUT:-600}"
PY=.venv/bin/python
SUMMARY=()
STEP_PID=

# `timeout` runs each step in a process group of its own, which a Ctrl-C at the terminal does
# not reach: pass INT / TERM on to it (it signals its whole group), then stop.
on_signal() {
    if [ -n "$STEP_PID" ]; then
        kill -TERM "$STEP_PID" 2>/dev/null || true
        wait "$STEP_PID" 2>/dev/null || true
    fi
    echo "smoke.sh: interrupted" >&2
    exit 130
}
trap on_signal INT TERM

die() {
    echo "smoke.sh: $*" >&2
    exit 1
}

now() { echo "${EPOCHREALTIME/,/.}"; }

# step NAME COMMAND...: runs COMMAND bounded by STEP_TIMEOUT, prints its wall time.
step() {
    local name="$1" t0 t1 rc=0 secs line
    shift
    echo
    echo "=== smoke: $name ==="
    t0=$(now)
    timeout --kill-after=10 "$STEP_TIMEOUT" "$@" &
    STEP_PID=$!
    wait "$STEP_PID" || rc=$?
    STEP_PID=
    t1=$(now)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    if [ "$rc" -eq 0 ]; then
        line=$(printf 'smoke: %-58s ok      %6s s' "$name" "$secs")
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        line=$(printf 'smoke: %-58s TIMEOUT %6s s (limit %s s)' "$name" "$secs" "$STEP_TIMEOUT")
    else
        line=$(printf 'smoke: %-58s FAILED  %6s s (exit %s)' "$name" "$secs" "$rc")
    fi
    echo "$line"
    SUMMARY+=("$line")
    if [ "$rc" -ne 0 ]; then
        summary
        exit "$rc"
    fi
}

summary() {
    echo
    echo "=== smoke summary ==="
    printf '%s\n' "${SUMMARY[@]}"
}

# The preconditions the caller provides (cheap checks, clear messages).
[ -x "$PY" ] || die "no $PY: run \`make py-dev\` first"
timeout 60 "$PY" -c "import hullguard" 2>/dev/null \
    || die "the Python extension does not import from $PY: run \`make py-dev\` first"
timeout 60 node -e "require('./bindings-node/index.js')" 2>/dev/null \
    || die "bindings-node/index.js does not load: run \`make node-build\` first"

# bench/node's deps: npm ci unless node_modules is newer than the lock file and package.json
# (npm writes node_modules/.package-lock.json at the end of every install).
npm_ci_if_stale() {
    local hidden=bench/node/node_modules/.package-lock.json
    if [ -f "$hidden" ] && [ "$hidden" -nt bench/node/package-lock.json ] \
        && [ "$hidden" -nt bench/node/package.json ]; then
        echo "bench/node/node_modules is up to date with package-lock.json: npm ci skipped"
        return 0
    fi
    cd bench/node && npm ci --no-audit --no-fund --loglevel=error
}
export -f npm_ci_if_stale

started=$(now)
step "criterion: cargo bench --bench engine -- --test" \
    cargo bench --quiet -p hullguard-bench --bench engine -- --test
step "ratios --smoke" \
    cargo run --release --quiet -p hullguard-bench --bin ratios -- --smoke
step "host --smoke" \
    cargo run --release --quiet -p hullguard-bench --bin host -- --smoke
step "fleet --smoke" \
    cargo run --release --quiet -p hullguard-bench --bin fleet -- --smoke
step "bench/callgrind.sh --smoke" bench/callgrind.sh --smoke
step "pip install -r bench/python/requirements.txt" \
    .venv/bin/pip install --quiet -r bench/python/requirements.txt
step "bench/python/bench.py --smoke" "$PY" bench/python/bench.py --smoke
step "npm ci (bench/node)" bash -c npm_ci_if_stale
step "bench/node/bench.mjs --smoke" \
    bash -c 'cd bench/node && exec node --expose-gc bench.mjs --smoke'
step "bench/c/run.sh --smoke" bench/c/run.sh --smoke
summary
echo "smoke: all ${#SUMMARY[@]} steps ok in $(awk -v a="$started" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s"
