#!/usr/bin/env bash
# kart's own cost per compiled artifact: everything a build does besides nvcc and ptxas
# (planning, keys, scheduling, reading what the compilers wrote, hashing, compressing,
# storing, entries, the lock). A fresh project of one trivial template kernel `tiny<A, B>`
# (A x 100 configs for sm_80 and sm_90) is built from an empty store; the CPU time of the
# kart process itself (utime + stime from /proc/PID/stat, sampled every 20 ms until it
# exits; its children's time is counted apart by the kernel) is divided by the artifacts
# it compiled. Run it for this kart and a baseline in one go to compare.
#
# Usage: bench/build_overhead.sh [A_VALUES] [KART...]   (default: 2, i.e. 400 artifacts;
#        target/release/kart)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
a_values=${1:-2}
shift || true
karts=("$@")
[[ ${#karts[@]} -eq 0 ]] && karts=("$repo/target/release/kart")
export KART_NVCC=${KART_NVCC:-$repo/.toolchain/py/nvidia/cu13/bin/nvcc}
hz=$(getconf CLK_TCK)

echo "kart's own CPU time per compiled artifact: tiny<A, B>, A = 0..$((a_values - 1)), B = 0..99, sm_80 and sm_90, empty store"
echo "commit: $(git -C "$repo" rev-parse HEAD)$(git -C "$repo" diff --quiet HEAD -- src crates || echo ' with uncommitted changes')"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
for kart in "${karts[@]}"; do
  kart=$(realpath "$kart")
  work=$(mktemp -d)
  mkdir -p "$work/kernels/tiny"
  printf '[project]\ntargets = ["sm_80", "sm_90"]\n[toolchain]\nnvcc = "13.0"\n' > "$work/kart.toml"
  printf 'template <int A, int B>\n__global__ void tiny(int* out) { out[threadIdx.x] = A * 1000 + B; }\n' \
    > "$work/kernels/tiny/tiny.cu"
  {
    echo 'name = "tiny"'
    echo 'sources = ["tiny.cu"]'
    echo 'entry = ["tiny<A, B>"]'
    echo '[params]'
    echo "A = [$(seq -s ', ' 0 $((a_values - 1)))]"
    echo "B = [$(seq -s ', ' 0 99)]"
  } > "$work/kernels/tiny/kernel.toml"
  t0=$(date +%s%N)
  (cd "$work" && exec "$kart" -q build) &
  pid=$!
  ticks=0
  while [[ -r /proc/$pid/stat ]]; do
    # Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
    now=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $12 + $13}') || break
    [[ -n $now ]] && ticks=$now
    sleep 0.02
  done
  wait "$pid"
  t1=$(date +%s%N)
  n=$(grep -c '^\[\[artifact\]\]' "$work/kart.lock")
  printf '  %-28s %6d artifacts in %7.1f s; kart itself %7.2f s CPU = %5.2f ms per artifact\n' \
    "$(basename "$(dirname "$(dirname "$kart")")")/$(basename "$kart")" "$n" \
    "$(echo "($t1 - $t0) / 1000000000" | bc -l)" "$(echo "$ticks / $hz" | bc -l)" \
    "$(echo "$ticks * 1000 / $hz / $n" | bc -l)"
  rm -rf "$work"
done
