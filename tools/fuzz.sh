#!/usr/bin/env bash
# Runs every fuzz target in the module (or those of the packages given) for FUZZTIME
# each, with minimisation capped at FUZZMINIMIZE so that a crash found late is still
# reported within the budget. A crash leaves its input under the package's
# testdata/fuzz/, where the next `go test` replays it as a seed.
#   FUZZTIME=30s bash tools/fuzz.sh ./registry/... ./controlplane/access
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
fuzztime=${FUZZTIME:-20s}
minimize=${FUZZMINIMIZE:-5s}
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
failed=0
for pkg in $(go list "${pkgs[@]}"); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    echo "== $pkg $target"
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" \
        -fuzzminimizetime "$minimize" "$pkg"; then
      failed=1
    fi
  done
done
exit $failed
