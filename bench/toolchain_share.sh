#!/usr/bin/env bash
# What a second `[toolchain] components` set costs in one kart home: bytes downloaded and
# disk used, for two kart binaries in one run (an earlier kart given as the argument,
# and this checkout's target/release/kart), each into a fresh empty home.
# Run from the repository root:  bench/toolchain_share.sh PATH/TO/OTHER/kart
# 1. A project made by `kart init` (nvcc 13.0, no components): `kart toolchain install`.
# 2. Another project pinning the same nvcc plus one component (nvidia-nvtx==13.0.85):
#    `kart toolchain install` of that second set.
# 3. A third set (plus nvidia-curand==10.4.0.35).
# After each install: what kart says it downloaded, and `du -sb` of the home (a file
# linked twice counted once). Temporary paths are printed as $TMP.
set -euo pipefail
exec > >(sed -u "s#$(dirname "$(mktemp -u)")/tmp\.[A-Za-z0-9]*#\$TMP#g")
other=$(realpath "$1")
this=$(realpath target/release/kart)
echo "kart $(git rev-parse --short HEAD) (this checkout) against another kart, $(nproc) cores, $(uname -m)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mb() { python3 -c "import sys; print(f'{int(sys.argv[1]) / 1e6:.1f} MB')" "$1"; }
for which in before after; do
  kart=$this
  [[ $which == before ]] && kart=$other
  home=$work/home-$which
  echo "== $which: $([[ $which == before ]] && echo "the other kart" || echo target/release/kart)"
  for set in default nvtx curand; do
    proj=$work/$which-$set
    "$kart" init "$proj" >/dev/null 2>&1
    case $set in
      nvtx) sed -i 's/^nvcc = "13.0".*/&\ncomponents = ["nvidia-nvtx==13.0.85"]/' "$proj/kart.toml" ;;
      curand) sed -i 's/^nvcc = "13.0".*/&\ncomponents = ["nvidia-curand==10.4.0.35", "nvidia-nvtx==13.0.85"]/' "$proj/kart.toml" ;;
    esac
    start=$(date +%s.%N)
    report=$(cd "$proj" && KART_HOME=$home "$kart" toolchain install --json 2>/dev/null)
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    downloaded=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["downloaded"])' "$report")
    used=$(du -sb "$home" | cut -f1)
    printf '%-8s set %-7s downloaded %10s (%s)  home on disk %10s (%s)  wall %.1f s\n' \
      "$which" "$set" "$downloaded" "$(mb "$downloaded")" "$used" "$(mb "$used")" "$wall"
    echo "         report: $report" | tr -d '\n' | cut -c1-600
    echo
  done
  (cd "$work/$which-nvtx" && KART_HOME=$home "$kart" toolchain list)
  nvcc_a=$(cd "$work/$which-default" && KART_HOME=$home "$kart" toolchain path nvcc)
  nvcc_b=$(cd "$work/$which-nvtx" && KART_HOME=$home "$kart" toolchain path nvcc)
  echo "nvcc of the default set and of the nvtx set: inodes $(stat -c %i "$nvcc_a") and $(stat -c %i "$nvcc_b"), links $(stat -c %h "$nvcc_b"), mode $(stat -c %a "$nvcc_b")"
done
