#!/usr/bin/env bash
# Build benchmark: cold build at --jobs 1 and at the default, no-op rebuild, --locked
# check and the store's compression ratio, on a synthetic grid of 128 artifacts plus
# the repository's kernels. Prints figures and ratios measured in this one run.
# Usage: bench/build.sh [KART_BINARY]   (after scripts/setup)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
kart=${1:-$repo/target/release/kart}
export KART_NVCC=$repo/.toolchain/py/nvidia/cu13/bin/nvcc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc -l; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

make_project() {  # a 4x4x4 grid for 2 targets (128 cubins) plus the repository's kernels
  local dir=$1
  mkdir -p "$dir/kernels/synth"
  cp -r "$repo/kernels/." "$dir/kernels/"
  cat > "$dir/kart.toml" <<'TOML'
[project]
targets = ["sm_80", "sm_90"]
[toolchain]
nvcc = "13.0"
TOML
  cat > "$dir/kernels/synth/kernel.toml" <<'TOML'
name = "synth"
sources = ["synth.cu"]
entry = ["synth"]
flags = ["-O3"]
[params]
TILE = [32, 64, 128, 256]
UNROLL = [1, 2, 4, 8]
STAGES = [1, 2, 3, 4]
TOML
  cat > "$dir/kernels/synth/synth.cu" <<'CU'
// A small tiled reduction whose code changes with every param.
extern "C" __global__ void synth(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float tile[TILE * STAGES];
    float acc = 0.f;
    for (int base = blockIdx.x * TILE * UNROLL; base < n; base += gridDim.x * TILE * UNROLL) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            int i = base + u * TILE + threadIdx.x;
            tile[(u % STAGES) * TILE + threadIdx.x % TILE] = i < n ? x[i] : 0.f;
            __syncthreads();
            acc += tile[(u % STAGES) * TILE + (threadIdx.x + 1) % TILE] * (u + 1);
            __syncthreads();
        }
    }
    y[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
CU
}

echo "kart build benchmark"
echo "commit: $(git -C "$repo" rev-parse HEAD)"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "nvcc: $("$KART_NVCC" --version | tail -n 2 | head -n 1)"

declare -A cold
for jobs in 1 default; do
  dir=$work/jobs-$jobs
  make_project "$dir"
  # Fingerprint the toolchain and pass the smoke gate outside the timed region: both
  # happen once per store, not once per build.
  (cd "$dir" && "$kart" -q build smoke >/dev/null)
  args=(-q build)
  [[ $jobs != default ]] && args+=(--jobs "$jobs")
  t0=$(now); (cd "$dir" && "$kart" "${args[@]}"); t1=$(now)
  cold[$jobs]=$(secs "$t0" "$t1")
  n=$(grep -c '^\[\[artifact\]\]' "$dir/kart.lock")
  printf 'cold build, --jobs %-7s: %6.1f s for %d artifacts (%.2f s each)\n' "$jobs" "${cold[$jobs]}" "$n" "$(echo "${cold[$jobs]} / $n" | bc -l)"
done
printf 'parallel speedup (default jobs = %d cores): %.2fx\n' "$(nproc)" "$(echo "${cold[1]} / ${cold[default]}" | bc -l)"

dir=$work/jobs-default
noop=$(for i in $(seq 21); do t0=$(now); (cd "$dir" && "$kart" -q build); t1=$(now); secs "$t0" "$t1"; done | median)
printf 'no-op rebuild (%d artifacts): median of 21 runs %.1f ms\n' "$n" "$(echo "$noop * 1000" | bc -l)"
locked=$(for i in $(seq 21); do t0=$(now); (cd "$dir" && "$kart" -q build --locked); t1=$(now); secs "$t0" "$t1"; done | median)
printf -- '--locked check (%d artifacts): median of 21 runs %.1f ms\n' "$n" "$(echo "$locked * 1000" | bc -l)"

# Bytes of the distinct artifacts (identical cubins of different configs are stored once).
raw=$(awk '/^digest = /{d=$3} /^size = /{if (!(d in seen)) {seen[d]=1; s+=$3}} END{print s}' "$dir/kart.lock")
stored=$(find "$dir/artifacts/v1/blobs" -type f -printf '%s\n' | awk '{s+=$1} END{print s}')
blobs=$(find "$dir/artifacts/v1/blobs" -type f | wc -l)
printf 'store: %d artifacts in %d distinct blobs; %d bytes of distinct cubins, %d bytes stored: compression ratio %.2f\n' \
  "$n" "$blobs" "$raw" "$stored" "$(echo "$raw / $stored" | bc -l)"
