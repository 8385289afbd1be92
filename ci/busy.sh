#!/usr/bin/env bash
# Runs a command on a busy machine: one CPU hog per core (a busy loop each, at normal priority,
# like the other jobs a shared CI runner has), the command, then the hogs stopped — also when
# the command fails or is interrupted. How issue 21 proves that `make test` passes under load:
#
#   ci/busy.sh make test          # twice in a row: ci/busy.sh bash -c 'make test && make test'
#
# HOGS sets the number of hogs (default: the CPUs). Prints the load average before and after.
set -uo pipefail

hogs="${HOGS:-$(nproc)}"
pids=()
stop() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait "${pids[@]}" 2>/dev/null
}
trap stop EXIT INT TERM
for _ in $(seq "$hogs"); do
    (while :; do :; done) &
    pids+=("$!")
done
echo "busy.sh: $hogs CPU hogs running ($(cut -d' ' -f1-3 /proc/loadavg) load); running: $*"
"$@"
rc=$?
echo "busy.sh: the command exited $rc (load $(cut -d' ' -f1-3 /proc/loadavg)); stopping the hogs"
exit "$rc"
