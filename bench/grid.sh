#!/usr/bin/env bash
# Grid enumeration and the no-op build, timed (medians). Run from the repository root
# after `scripts/setup && target/release/kart build`:
#   bench/grid.sh [OLD_KART OLD_CHECKOUT]
# 1. `kart build --explain-grid` on bench/grid (100,000 raw combinations, 5 rules, a
#    derived param): the whole command, median of 11.
# 2. A no-op `kart build` of the repository, median of 21; with an older kart (and the
#    checkout it was built from, for its commit), both again with it, on this
#    repository (the older kart must read its kart.lock).
set -euo pipefail
kart=$(realpath target/release/kart)
export KART_NVCC=${KART_NVCC:-$PWD/.toolchain/py/nvidia/cu13/bin/nvcc}
source "$(dirname "$0")/median_ms.sh"
echo "kart $(git rev-parse --short HEAD), $(nproc) cores"
"$kart" -C bench/grid build --explain-grid | sed 's/^/  /'
echo "explain-grid, 100k raw combinations: $(median_ms 11 "$kart" -C bench/grid build --explain-grid) ms (whole command, median of 11)"
"$kart" -q build  # warm: everything from the store
echo "no-op build of the repository, this kart: $(median_ms 21 "$kart" -q build) ms (median of 21)"
if [[ $# -eq 2 ]]; then
  old=$(realpath "$1"); dir=$2
  echo "older kart: $("$old" --version) built from $(git -C "$dir" rev-parse --short HEAD)"
  echo "explain-grid, 100k raw combinations, older kart: $(median_ms 11 "$old" -C bench/grid build --explain-grid) ms (whole command, median of 11)"
  echo "no-op build of the repository, older kart: $(median_ms 21 "$old" -q build) ms (median of 21)"
fi
