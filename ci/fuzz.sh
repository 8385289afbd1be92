#!/usr/bin/env bash
# The cargo-fuzz targets of fuzz/ (docs/design.md §11, "Fuzzing"): builds every target once
# (nightly, ASan, debug assertions and overflow checks on), then runs each for a bounded time
# and prints, per target, the runs, exec/s, coverage, corpus size and crashes. Exits non-zero
# on any crash, hang, leak or out-of-memory (libFuzzer's artifact is kept and named).
#
#   ci/fuzz.sh                  every target for 60 s (`make fuzz`)
#   ci/fuzz.sh --smoke          every target for 10 s (`make fuzz-smoke`, in `make test`)
#   ci/fuzz.sh --time 300 c_abi origin_key
#                               chosen targets, chosen seconds
#
# Environment: FUZZ_TARGET_DIR (default "${CARGO_TARGET_DIR:-target}/fuzz": the build, the
# full runs' corpora, the artifacts and logs), FUZZ_JOBS (targets run at once; default the
# number of CPUs), FUZZ_RSS_MB (default 2048), FUZZ_TIMEOUT (seconds one input may take before
# it counts as a hang; default 10).
#
# The committed seed corpora (fuzz/corpus/<target>/seed-*) never change here: a smoke run
# fuzzes a throwaway copy; a full run fuzzes "$FUZZ_TARGET_DIR/corpus/<target>" (the seeds
# plus what earlier full runs found; gitignored, so coverage accumulates across runs). To
# reproduce a crash: "$FUZZ_TARGET_DIR/x86_64-unknown-linux-gnu/release/<target> <artifact>".
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

NIGHTLY="${NIGHTLY:-nightly}"
secs=60
mode=full
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) secs=10; mode=smoke ;;
        --time) secs="$2"; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
        *) targets+=("$1") ;;
    esac
    shift
done

out="${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}/fuzz}"
case "$out" in /*) ;; *) out="$root/$out" ;; esac
jobs="${FUZZ_JOBS:-$(nproc)}"
rss="${FUZZ_RSS_MB:-2048}"
timeout="${FUZZ_TIMEOUT:-10}"

all=()
for f in fuzz/fuzz_targets/*.rs; do all+=("$(basename "$f" .rs)"); done
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
    [ -f "fuzz/fuzz_targets/$t.rs" ] || { echo "fuzz.sh: no target $t (have: ${all[*]})" >&2; exit 2; }
done

# One build of every target (the binaries land in $out/<triple>/release/).
echo "fuzz: building ${#all[@]} targets into $out"
start=$(date +%s.%N)
cargo "+$NIGHTLY" fuzz build --fuzz-dir fuzz --debug-assertions --target-dir "$out" >&2
echo "fuzz: build $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
triple="$(rustc "+$NIGHTLY" -vV | sed -n 's/^host: //p')"
bin="$out/$triple/release"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out/logs" "$out/artifacts"

# Runs target $1 for $secs seconds; its summary line goes to $work/$1.summary.
run_one() {
    local t="$1" corpus log art
    log="$out/logs/$t.log"
    art="$out/artifacts/$t"
    rm -rf "$art"
    mkdir -p "$art"
    if [ "$mode" = smoke ]; then
        corpus="$work/corpus/$t"
    else
        corpus="$out/corpus/$t"
    fi
    mkdir -p "$corpus"
    if [ -d "fuzz/corpus/$t" ]; then
        cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
    fi
    local rc=0
    # -rss_limit_mb / -timeout: an input over them is a finding (an oom- / timeout- artifact).
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}" \
        "$bin/$t" "$corpus" \
        -max_total_time="$secs" -rss_limit_mb="$rss" -timeout="$timeout" \
        -artifact_prefix="$art/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
    local runs eps cov ft files crashes
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1 || true)"
    eps="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1 || true)"
    cov="$( (grep -oE 'cov: [0-9]+' "$log" || true) | tail -n 1 | cut -d' ' -f2)"
    ft="$( (grep -oE 'ft: [0-9]+' "$log" || true) | tail -n 1 | cut -d' ' -f2)"
    files="$(find "$corpus" -type f | wc -l)"
    crashes="$(find "$art" -type f | wc -l)"
    if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes="?"; fi
    printf '%-22s %10s %8s %7s %7s %7s %8s  %s\n' "$t" "${runs:--}" "${eps:--}" "${cov:--}" \
        "${ft:--}" "$files" "$crashes" "$(if [ "$rc" -eq 0 ]; then echo ok; else echo "FAILED (exit $rc)"; fi)" \
        >"$work/$t.summary"
    return 0
}

echo "fuzz: $mode run, ${secs} s per target, $jobs at once: ${targets[*]}"
start=$(date +%s.%N)
running=0
for t in "${targets[@]}"; do
    run_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait
elapsed="$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"

echo
printf '%-22s %10s %8s %7s %7s %7s %8s  %s\n' target runs exec/s cov ft corpus crashes result
failed=0
for t in "${targets[@]}"; do
    if [ -f "$work/$t.summary" ]; then
        cat "$work/$t.summary"
    else
        printf '%-22s %s\n' "$t" "FAILED (no summary: the run script itself failed)"
    fi
    if ! grep -qs ' ok$' "$work/$t.summary"; then
        failed=$((failed + 1))
        echo "  log: $out/logs/$t.log"
        for a in "$out/artifacts/$t"/*; do
            [ -e "$a" ] || continue
            echo "  artifact: $a"
            echo "  reproduce: $bin/$t $a"
        done
        # The first report and its message (a panic's is on the next line).
        grep -m 1 -A 1 -E 'panicked at|ERROR: AddressSanitizer|ERROR: LeakSanitizer|ERROR: libFuzzer' \
            "$out/logs/$t.log" | sed 's/^/  /' || true
    fi
done
echo "fuzz: ${#targets[@]} targets in $elapsed s; $failed failed"
[ "$failed" -eq 0 ]
