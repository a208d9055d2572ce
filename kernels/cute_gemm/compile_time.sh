#!/usr/bin/env bash
# What a CuTe kernel costs to compile, and what its headers cost a no-op build. Run
# from the repository root after `scripts/setup && target/release/kart build`:
#   kernels/cute_gemm/compile_time.sh
# 1. nvcc's wall time per config of kernels/cute_gemm (a template entry over 10 configs,
#    CUTLASS/CuTe headers), one compile at a time, in a fresh project with an empty
#    store (the CUTLASS include folder copied in as a vendored `path` library).
# 2. A no-op `kart build` of the repository (every kernel; CUTLASS's headers declared
#    in kart.toml and hashed through the stamp cache), median of 21.
set -euo pipefail
kart=$(realpath target/release/kart)
export KART_NVCC=${KART_NVCC:-$PWD/.toolchain/py/nvidia/cu13/bin/nvcc}
include=$("$kart" toolchain path cutlass)/cutlass_library/source/include
source "$(dirname "$0")/../../bench/median_ms.sh"
echo "kart $(git rev-parse --short HEAD), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "headers: $(find "$include" -type f | wc -l) files, $(du -sm "$include" | cut -f1) MB"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/kernels" "$tmp/cutlass"
cp -r kernels/cute_gemm "$tmp/kernels/"
cp -r "$include" "$tmp/cutlass/include"
cat > "$tmp/kart.toml" <<TOML
[project]
targets = ["sm_90a"]
[toolchain]
nvcc = "13.0"
[library.cutlass]
path = "cutlass/include"
TOML
echo "nvcc wall time per config (kart build -j 1, empty store):"
t0=$(date +%s%N)
"$kart" -C "$tmp" build -j 1 --no-remote 2>&1 | grep -E '^  compiled' | sed 's/^  compiled /  /'
t1=$(date +%s%N)
echo "all configs, one at a time: $(( (t1 - t0) / 1000000 )) ms"
"$kart" -q build  # warm: everything from the store
echo "no-op build of the repository ($(grep -c '^\[\[artifact\]\]' kart.lock) artifacts, CUTLASS declared): $(median_ms 21 "$kart" -q build) ms (median of 21)"
