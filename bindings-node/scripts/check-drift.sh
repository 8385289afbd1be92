#!/usr/bin/env bash
# No drift in the generated addon files: run after `npm run build` (`make node-build`). The
# loader native.js and the typings native.d.ts that napi just generated must be exactly the
# committed ones (a changed #[napi] signature must be committed together with them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "check-drift: not a git checkout, skipped" >&2
    exit 0
fi
status=0
for f in native.d.ts native.js; do
    if ! git ls-files --error-unmatch -- "$f" >/dev/null 2>&1; then
        echo "check-drift: bindings-node/$f is not tracked by git: commit the generated file" >&2
        status=1
    fi
done
if ! git diff --exit-code --stat -- native.d.ts native.js; then
    git diff -- native.d.ts native.js | head -n 60 >&2 || true
    echo "check-drift: bindings-node/native.d.ts / native.js differ from the committed version" \
        "after 'npm run build': review and commit them" >&2
    status=1
fi
[ "$status" -eq 0 ] && echo "check-drift: native.d.ts and native.js match the committed files"
exit "$status"
