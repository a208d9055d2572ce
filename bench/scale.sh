#!/usr/bin/env bash
# Bookkeeping at scale: one trivial template kernel `tiny<A, B>` over A x B configs for
# 2 targets, built once with the real nvcc; then, for each size, the no-op build,
# `build --locked`, `ls --json` and `path` of one artifact, medians of 5 with peak
# memory, for this kart and a baseline kart, in this one run.
#
# Usage: bench/scale.sh [A_VALUES...]        (default: 3 30, i.e. 600 and 6,000 artifacts)
#   KART_BIN       the kart measured (default: target/release/kart)
#   KART_BASELINE  the kart compared with; default: built from `main` into a temp folder
#   KART_SCALE_DIR keep the project and its store there, to reuse the build next time
#   RUNS           runs per median (default 5)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
kart=${KART_BIN:-$repo/target/release/kart}
runs=${RUNS:-5}
sizes=("$@")
[[ ${#sizes[@]} -eq 0 ]] && sizes=(3 30)
b_values=100
export KART_NVCC=$repo/.toolchain/py/nvidia/cu13/bin/nvcc
work=${KART_SCALE_DIR:-}
if [[ -z $work ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
project=$work/project

# The manifest for A in [0, a): every smaller grid is a narrowing of the largest, so
# one store serves every size.
write_manifest() {
  local a=$1
  mkdir -p "$project/kernels/tiny"
  cat > "$project/kart.toml" <<'TOML'
[project]
targets = ["sm_80", "sm_90"]
[toolchain]
nvcc = "13.0"
TOML
  cat > "$project/kernels/tiny/tiny.cu" <<'CU'
// As small as a kernel gets: each config's cubin differs only in two constants.
template <int A, int B>
__global__ void tiny(int* out) { out[threadIdx.x] = A * 1000 + B; }
CU
  {
    echo 'name = "tiny"'
    echo 'sources = ["tiny.cu"]'
    echo 'entry = ["tiny<A, B>"]'
    echo '[params]'
    echo "A = [$(seq -s ', ' 0 $((a - 1)))]"
    echo "B = [$(seq -s ', ' 0 $((b_values - 1)))]"
  } > "$project/kernels/tiny/kernel.toml"
}

max=$(printf '%s\n' "${sizes[@]}" | sort -n | tail -1)
# Fingerprints the toolchain and fills the store once: the largest grid with the real
# nvcc (a few minutes per 1,000 artifacts on 2 cores; nothing when the store has it).
build_store() {
  write_manifest "$max"
  echo "building the store for $((max * b_values * 2)) artifacts (reused when present)..." >&2
  (cd "$project" && nice -n 10 "$kart" -q build >&2)
}

baseline() {  # the kart of the commit this branch started from, built once
  if [[ -n ${KART_BASELINE:-} ]]; then
    echo "$KART_BASELINE"
    return
  fi
  local ref
  ref=$(git -C "$repo" merge-base HEAD "${BASE_REF:-main}")
  mkdir -p "$work/base-src"
  git -C "$repo" archive "$ref" | tar -x -C "$work/base-src"
  echo "building the baseline kart at ${ref:0:10}..." >&2
  cargo build -q --release --manifest-path "$work/base-src/Cargo.toml" \
    --target-dir "$work/base-target" --bin kart >&2
  echo "$work/base-target/release/kart"
}

# One run of a command in the project: "WALL_MS PEAK_KB".
run_once() {
  local t0 t1 peak
  t0=$(date +%s%N)
  if [[ -x /usr/bin/time ]]; then
    (cd "$project" && /usr/bin/time -f '%M' -o "$work/peak" "$@" >/dev/null 2>"$work/err") ||
      { cat "$work/err" >&2; echo "failed: $*" >&2; exit 1; }
    peak=$(tail -1 "$work/peak")
  else
    (cd "$project" && "$@" >/dev/null 2>"$work/err") ||
      { cat "$work/err" >&2; echo "failed: $*" >&2; exit 1; }
    peak=$(python3 -c 'import resource; print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)')
  fi
  t1=$(date +%s%N)
  echo "$(( (t1 - t0) / 1000 )) $peak"
}

median_col() {  # the median of column $1 of stdin
  awk -v c="$1" '{print $c}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

base=$(baseline)
build_store
echo "kart bookkeeping at scale: one template kernel tiny<A, B>, A x $b_values configs x 2 targets"
echo "commit: $(git -C "$repo" rev-parse HEAD)$(git -C "$repo" diff --quiet HEAD -- src crates || echo ' with uncommitted changes')"
echo "measured: $(basename "$kart"); baseline: $(basename "$base") (main at $(git -C "$repo" merge-base HEAD "${BASE_REF:-main}" | cut -c1-10) unless KART_BASELINE named another)"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -sr)"
echo "command: bench/scale.sh ${sizes[*]} (RUNS=$runs); median wall ms of $runs runs, peak RSS MB"
declare -A med
for a in "${sizes[@]}"; do
  write_manifest "$a"
  # The lock of this size, written once (every blob is in the store: nothing compiles).
  (cd "$project" && "$kart" -q build)
  n=$(grep -c '^\[\[artifact\]\]' "$project/kart.lock")
  pa=$((a > 7 ? 7 : a - 1))
  declare -A cmds=(
    [noop]="build"
    [noop-full]="build"
    [locked]="build --locked"
    [locked-full]="build --locked"
    [ls]="ls --json"
    [path]="path tiny -p A=$pa -p B=42 --target sm_90"
  )
  # A no-op build records what it proved (v1/settled/) once the store has been quiet
  # for two seconds; the `-full` rows remove that record before each run, so they time
  # the whole check a build makes after any change.
  echo
  echo "$n artifacts (A = 0..$((a - 1)); path of A=$pa B=42)"
  printf '  %-36s %10s %8s %10s %8s %8s\n' command "base ms" "base MB" "new ms" "new MB" "speedup"
  for c in noop noop-full locked locked-full ls path; do
    : > "$work/base.txt"; : > "$work/new.txt"
    read -r -a args <<< "${cmds[$c]}"
    if [[ $c == noop || $c == locked ]]; then
      # The settled record names the kart that wrote it, so each binary's runs come
      # in a block after its own recording build (interleaving would have each
      # binary undo the other's record and time full checks).
      for who in base new; do
        bin=$base; [[ $who == new ]] && bin=$kart
        (cd "$project" && "$bin" -q build && sleep 2.1 && "$bin" -q build)
        for _ in $(seq "$runs"); do
          run_once "$bin" -q "${args[@]}" >> "$work/$who.txt"
        done
      done
    else
      for _ in $(seq "$runs"); do  # interleaved, so both see the same machine
        [[ $c == *-full ]] && rm -rf "$project/artifacts/v1/settled"
        run_once "$base" -q "${args[@]}" >> "$work/base.txt"
        [[ $c == *-full ]] && rm -rf "$project/artifacts/v1/settled"
        run_once "$kart" -q "${args[@]}" >> "$work/new.txt"
      done
    fi
    bm=$(median_col 1 < "$work/base.txt"); bk=$(median_col 2 < "$work/base.txt")
    nm=$(median_col 1 < "$work/new.txt"); nk=$(median_col 2 < "$work/new.txt")
    med[$c-$a-base]=$bm; med[$c-$a-new]=$nm
    label="kart ${cmds[$c]}"
    [[ $c == *-full ]] && label+=" (full check)"
    printf '  %-36s %10.1f %8.0f %10.1f %8.0f %7.2fx\n' "$label" \
      "$(echo "$bm / 1000" | bc -l)" "$(echo "$bk / 1024" | bc -l)" \
      "$(echo "$nm / 1000" | bc -l)" "$(echo "$nk / 1024" | bc -l)" "$(echo "$bm / $nm" | bc -l)"
  done
done
if [[ ${#sizes[@]} -ge 2 ]]; then
  small=${sizes[0]}; large=${sizes[-1]}
  echo
  echo "growth from A=$small to A=$large ($((large / small))x the artifacts), median over median:"
  for c in noop noop-full locked locked-full ls path; do
    printf '  %-12s base %6.2fx   new %6.2fx\n' "$c" \
      "$(echo "${med[$c-$large-base]} / ${med[$c-$small-base]}" | bc -l)" \
      "$(echo "${med[$c-$large-new]} / ${med[$c-$small-new]}" | bc -l)"
  done
fi
