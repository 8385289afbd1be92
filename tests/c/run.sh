#!/usr/bin/env bash
# The C tests of hullguard's C ABI (`make c-test`):
#
#   1. tests/c/*.c (policies.c: the policies, C21/C22/C24; core_api.c: what the port to the core
#      admission API changed or added; admission.c: gateway admission, issue 16; host.c: the
#      host bulkhead with real processes, issue 19; fleet.c: the fleet bulkhead against real
#      redis-server processes with hiredis as its transport callback, issue 20 — it needs
#      libhiredis-dev and redis-server, which `make setup` installs) with gcc -std=c11 -Wall
#      -Wextra -Werror:
#      plain, under AddressSanitizer + UndefinedBehaviorSanitizer (leak detection on), and under
#      valgrind --leak-check=full;
#      threaded.c runs 10^6 operations under ASan and 10^4 under valgrind.
#   2. the C++17 example (examples/cpp) with g++ -std=c++17 -Wall -Wextra -Werror, plain and
#      under ASan + UBSan.
#   3. the scenario vectors through the ABI (cargo test -p hullguard-ffi: ffi/tests/vectors.rs),
#      and the admission ABI's edge cases from Rust (ffi/tests/admission_edges.rs).
#   4. `make install` into a temporary prefix, then smoke.c built against the installed files
#      with `pkg-config --cflags --libs` (shared) and against libhullguard.a (static), and run.
#
# Leak suppressions: LeakSanitizer needs none (it credits interior pointers); valgrind gets
# tests/c/valgrind.supp, whose two entries are explained there, host.c also
# tests/c/valgrind-host.supp and fleet.c tests/c/valgrind-fleet.supp. host.c forks: its children
# report their checks on a pipe, and valgrind runs them with --child-silent-after-fork=yes (a
# forked child's leak check counts the blocks of the parent's threads, which the child does not
# have, and would set its exit code). fleet.c forks too, to exec redis-server (not traced).
set -euo pipefail
cd "$(dirname "$0")/../.."

CC=${CC:-gcc}
CXX=${CXX:-g++}
MAKE=${MAKE:-make}
OUT=target/c-tests
LIB="${CARGO_TARGET_DIR:-target}/release/libhullguard.a"
LIBS=(-lpthread -ldl -lm)
CFLAGS=(-std=c11 -Wall -Wextra -Werror -g -O1 -Iffi/include -Itests/c)
CXXFLAGS=(-std=c++17 -Wall -Wextra -Werror -g -O1 -Iffi/include -Iexamples/cpp)
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
VALGRIND=(valgrind -q --leak-check=full --error-exitcode=1 --num-callers=40
          --suppressions=tests/c/valgrind.supp)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1

step() { printf '\n== %s\n' "$*"; }

step "build the C ABI (release)"
cargo build --quiet --release -p hullguard-ffi
mkdir -p "$OUT"

# The host bulkhead (hg_host_*) is Linux-only, as hullguard-host.
HOST=()
if [ "$(uname -s)" = Linux ]; then HOST=(host); fi

# The fleet bulkhead's test (hg_fleet_*) uses hiredis as the transport callback a C program
# brings (the library links no Redis client), and starts its own redis-server processes.
if ! echo '#include <hiredis/hiredis.h>' | "$CC" -E -x c - >/dev/null 2>&1; then
    echo "hiredis is missing (Debian: libhiredis-dev; 'make setup' installs it): tests/c/fleet.c needs it" >&2
    exit 1
fi
# The libraries of test $1 beyond LIBS.
extra_libs() { if [ "$1" = fleet ]; then echo -lhiredis; fi; }

step "C tests: plain"
for t in smoke bad_input cases threaded bugs policies core_api admission deadline edge "${HOST[@]}" fleet; do
    # shellcheck disable=SC2046  # no extra library, or one word
    "$CC" "${CFLAGS[@]}" "tests/c/$t.c" "$LIB" $(extra_libs "$t") "${LIBS[@]}" -o "$OUT/$t"
    "$OUT/$t"
done

step "C tests: AddressSanitizer + UBSan (detect_leaks=1)"
for t in smoke bad_input cases bugs policies core_api admission deadline edge "${HOST[@]}" fleet; do
    # shellcheck disable=SC2046
    "$CC" "${CFLAGS[@]}" "${SAN[@]}" "tests/c/$t.c" "$LIB" $(extra_libs "$t") "${LIBS[@]}" \
        -o "$OUT/$t-asan"
    "$OUT/$t-asan"
done
"$CC" "${CFLAGS[@]}" "${SAN[@]}" -DHG_OPS=1000000 tests/c/threaded.c "$LIB" "${LIBS[@]}" \
    -o "$OUT/threaded-asan"
"$OUT/threaded-asan"

if command -v valgrind >/dev/null; then
    step "C tests: valgrind --leak-check=full"
    export HG_UNDER_VALGRIND=1
    for t in smoke bad_input cases policies core_api admission deadline edge; do
        "${VALGRIND[@]}" "$OUT/$t"
    done
    for t in "${HOST[@]}"; do
        "${VALGRIND[@]}" --child-silent-after-fork=yes --suppressions=tests/c/valgrind-host.supp \
            "$OUT/$t"
    done
    "${VALGRIND[@]}" --child-silent-after-fork=yes --suppressions=tests/c/valgrind-fleet.supp \
        "$OUT/fleet"
    "$CC" "${CFLAGS[@]}" -DHG_OPS=10000 tests/c/threaded.c "$LIB" "${LIBS[@]}" \
        -o "$OUT/threaded-vg"
    "${VALGRIND[@]}" "$OUT/threaded-vg"
    unset HG_UNDER_VALGRIND
else
    echo "valgrind not installed: FAIL (the C ABI's bar includes valgrind, docs/design.md §11)" >&2
    exit 1
fi

step "C++17 example (examples/cpp): plain and ASan + UBSan"
"$CXX" "${CXXFLAGS[@]}" examples/cpp/example.cpp "$LIB" "${LIBS[@]}" -o "$OUT/cpp-example"
"$OUT/cpp-example"
"$CXX" "${CXXFLAGS[@]}" "${SAN[@]}" examples/cpp/example.cpp "$LIB" "${LIBS[@]}" \
    -o "$OUT/cpp-example-asan"
"$OUT/cpp-example-asan"

step "scenario vectors through the C ABI (ffi/tests/vectors.rs); admission edge cases (ffi/tests/admission_edges.rs)"
cargo test --quiet -p hullguard-ffi --test vectors
cargo test --quiet -p hullguard-ffi --test admission_edges
# Again, to print which vectors ran and which an ABI gap skips.
cargo test --quiet -p hullguard-ffi --test vectors -- --exact scenario_vectors_through_the_c_abi \
    --nocapture 2>&1 | grep -E '^ *(C ABI vectors|SKIPPED)'

step "make install into a temp prefix; build against it with pkg-config"
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
"$MAKE" --no-print-directory install PREFIX="$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
ls "$prefix/lib/libhullguard.a" "$prefix/lib/libhullguard.so" "$prefix/include/hullguard.h" \
    "$prefix/lib/pkgconfig/hullguard.pc" >/dev/null
echo "pkg-config: hullguard $(pkg-config --modversion hullguard):" \
    "$(pkg-config --cflags --libs hullguard)"
# Shared: exactly what pkg-config says (plus an rpath so the program finds the .so).
# shellcheck disable=SC2046  # word splitting of pkg-config's flags is intended
"$CC" -std=c11 -Wall -Wextra -Werror tests/c/smoke.c -Itests/c $(pkg-config --cflags hullguard) \
    $(pkg-config --libs hullguard) -Wl,-rpath,"$(pkg-config --variable=libdir hullguard)" \
    -o "$prefix/smoke-shared"
# (grep without -q: with pipefail, an early exit of grep -q could fail the pipeline on SIGPIPE)
ldd "$prefix/smoke-shared" | grep "$prefix/lib/libhullguard.so" >/dev/null
"$prefix/smoke-shared"
# Static: the archive plus the private libraries pkg-config lists for a static link.
# shellcheck disable=SC2046
"$CC" -std=c11 -Wall -Wextra -Werror tests/c/smoke.c -Itests/c $(pkg-config --cflags hullguard) \
    "$(pkg-config --variable=libdir hullguard)/libhullguard.a" \
    $(pkg-config --static --libs-only-l hullguard | sed 's/-lhullguard//') -o "$prefix/smoke-static"
if ldd "$prefix/smoke-static" | grep libhullguard >/dev/null; then
    echo "the static build links libhullguard.so" >&2
    exit 1
fi
"$prefix/smoke-static"

step "c-test: all passed"
