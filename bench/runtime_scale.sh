#!/usr/bin/env bash
# The runtime at scale: what a program pays to reach one artifact of a large lock,
# without a GPU, for this kart and the kart of `main`, in one run. The project is
# bench/scale.sh's: one template kernel `tiny<A, B>`, A x 100 configs x 2 targets (600
# and 6,000 artifacts by default). For each size, medians of RUNS processes:
#   open+select+read  crates/kart-runtime/examples/open_one.rs: Runtime::open, select of
#                     tiny[A=7,B=42] for a 9.0 GPU, read and verify its blob (all that
#                     precedes cuModuleLoadData), from the project and from a bundle
#   kart path         `kart path tiny -p A=7 -p B=42 --target sm_90`
#   python            `kart export --python --all-configs tiny`, then in a new python3:
#                     import, load(A=7, B=42) and its cubin decoded and verified (all
#                     that precedes the driver), compiled from source (no .pyc) and
#                     from a .pyc
#
# Usage: bench/runtime_scale.sh [A_VALUES...]     (default: 3 30)
#   KART_SCALE_STORE  an `artifacts/` folder holding the 6,000 blobs (bench/scale.sh's
#                     KART_SCALE_DIR/project/artifacts); copied, never written. Without
#                     it the store is built here with the real nvcc (about 30 minutes).
#   KART_BASELINE     the baseline's source tree, built (`target/release/kart` and the
#                     `open_one` example under its target/); default: `main`'s
#                     merge-base, archived and built here
#   KART_BASELINE_KART  the baseline's kart binary, if not KART_BASELINE's own
#   RUNS              processes per median (default 5)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-5}
sizes=("$@")
[[ ${#sizes[@]} -eq 0 ]] && sizes=(3 30)
export KART_NVCC=$repo/.toolchain/py/nvidia/cu13/bin/nvcc
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
project=$work/project

write_manifest() {  # as bench/scale.sh writes it: every grid a narrowing of the largest
  local a=$1
  mkdir -p "$project/kernels/tiny"
  printf '[project]\ntargets = ["sm_80", "sm_90"]\n[toolchain]\nnvcc = "13.0"\n' > "$project/kart.toml"
  # The same bytes as bench/scale.sh's, so that its store serves (the keys hash them).
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
    echo "B = [$(seq -s ', ' 0 99)]"
  } > "$project/kernels/tiny/kernel.toml"
}

# The baseline: its kart and the same example program, built from its own tree.
base=${KART_BASELINE:-}
if [[ -z $base ]]; then
  base=$work/base
  mkdir -p "$base"
  git -C "$repo" archive "$(git -C "$repo" merge-base HEAD "${BASE_REF:-main}")" | tar -x -C "$base"
  echo "building the baseline..." >&2
  cargo build -q --release --manifest-path "$base/Cargo.toml" --bin kart >&2
fi
mkdir -p "$base/crates/kart-runtime/examples"
cp "$repo/crates/kart-runtime/examples/open_one.rs" "$base/crates/kart-runtime/examples/"
(cd "$base" && cargo build -q --release -p kart-runtime --example open_one >&2)
(cd "$repo" && cargo build -q --release --bin kart && cargo build -q --release -p kart-runtime --example open_one) >&2
declare -A kart=([base]=${KART_BASELINE_KART:-$base/target/release/kart} [new]=$repo/target/release/kart)
declare -A open_one=([base]=$base/target/release/examples/open_one [new]=$repo/target/release/examples/open_one)

max=$(printf '%s\n' "${sizes[@]}" | sort -n | tail -1)
write_manifest "$max"
if [[ -n ${KART_SCALE_STORE:-} ]]; then
  cp -r "$KART_SCALE_STORE" "$project/artifacts"
fi
(cd "$project" && nice -n 10 "${kart[new]}" -q build >&2)

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms_of() {  # wall ms of one run of a command
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null
  t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000 )) | awk '{printf "%.1f\n", $1 / 1000}'
}
py_time() {  # MODULE_DIR A: ms of import, load() and the cubin's decode and check
  python3 - "$1" "$2" <<'PY'
import importlib, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
m = importlib.import_module("tiny_kernels")
t1 = time.perf_counter()
launcher = m.load("tiny", A=int(sys.argv[2]), B=42)
artifact = launcher._artifacts["sm_90"]
t2 = time.perf_counter()
assert len(m._cubin(artifact)) == artifact["size"]
t3 = time.perf_counter()
print(f"{(t1 - t0) * 1e3:.1f} {(t2 - t1) * 1e3:.2f} {(t3 - t2) * 1e3:.2f} {(t3 - t0) * 1e3:.1f}")
PY
}

echo "runtime at scale: one template kernel tiny<A, B>, A x 100 configs x 2 targets"
echo "commit: $(git -C "$repo" rev-parse HEAD)$(git -C "$repo" diff --quiet HEAD -- src crates || echo ' with uncommitted changes')"
echo "baseline: main's merge-base $(git -C "$repo" merge-base HEAD "${BASE_REF:-main}" | cut -c1-10) unless KART_BASELINE named another tree; its kart: ${KART_BASELINE_KART:-built from it}"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -sr), $(python3 --version), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "medians of $runs processes, ms"
for a in "${sizes[@]}"; do
  write_manifest "$a"
  (cd "$project" && "${kart[new]}" -q build)
  n=$(grep -c '^\[\[artifact\]\]' "$project/kart.lock")
  pa=$((a > 7 ? 7 : a - 1))
  echo
  echo "$n artifacts (kart.lock $(($(stat -c %s "$project/kart.lock") / 1024)) KiB; tiny[A=$pa,B=42])"
  printf '[[fleet]]\nname = "NVIDIA A100-SXM4-80GB"\ncapability = "8.0"\n[[fleet]]\nname = "NVIDIA H100 80GB HBM3"\ncapability = "9.0"\n' \
    > "$work/fleet.toml"
  for which in base new; do  # each kart's own bundle format
    (cd "$project" && "${kart[$which]}" -q bundle --fleet "$work/fleet.toml" -o "$work/all-$which.kartbundle" tiny >&2)
  done
  echo "  bundle of every artifact: $(($(stat -c %s "$work/all-new.kartbundle") / 1024)) KiB (base $(($(stat -c %s "$work/all-base.kartbundle") / 1024)) KiB)"
  for which in base new; do
    rm -rf "$work/py-$which" && mkdir -p "$work/py-$which"
    (cd "$project" && "${kart[$which]}" -q export --python --all-configs -o "$work/py-$which/tiny_kernels.py" tiny >&2)
  done
  echo "  python module: $(($(stat -c %s "$work/py-new/tiny_kernels.py") / 1024)) KiB (base $(($(stat -c %s "$work/py-base/tiny_kernels.py") / 1024)) KiB)"
  for round in $(seq "$runs"); do
    for which in base new; do
      "${open_one[$which]}" "$project" tiny 9.0 A=$pa B=42 >> "$work/open-$which-$a"
      "${open_one[$which]}" "$work/all-$which.kartbundle" tiny 9.0 A=$pa B=42 >> "$work/bundle-$which-$a"
      (cd "$project" && ms_of "${kart[$which]}" path tiny -p A=$pa -p B=42 --target sm_90) >> "$work/path-$which-$a"
      PYTHONDONTWRITEBYTECODE=1 py_time "$work/py-$which" $pa >> "$work/pysrc-$which-$a"
    done
  done
  for which in base new; do  # from a .pyc, as an installed package imports
    python3 -m py_compile "$work/py-$which/tiny_kernels.py"
    for round in $(seq "$runs"); do py_time "$work/py-$which" $pa >> "$work/pyc-$which-$a"; done
  done
  printf '  %-44s %12s %12s\n' "" base new
  row() {  # label file-prefix column
    printf '  %-44s %12s %12s\n' "$1" "$(cut -d' ' -f"$3" "$work/$2-base-$a" | median)" "$(cut -d' ' -f"$3" "$work/$2-new-$a" | median)"
  }
  row "Runtime::open (project)" open 1
  row "  select" open 2
  row "  read + verify the blob" open 3
  row "  total to cuModuleLoadData" open 4
  row "  peak RSS, KiB" open 5
  row "Runtime::open_bundle" bundle 1
  row "  total to cuModuleLoadData" bundle 4
  row "  peak RSS, KiB" bundle 5
  row "kart path (process)" path 1
  row "python, no .pyc: import" pysrc 1
  row "  load()" pysrc 2
  row "  cubin decoded and checked" pysrc 3
  row "  total to the driver" pysrc 4
  row "python, .pyc: import" pyc 1
  row "  load()" pyc 2
  row "  total to the driver" pyc 4
done
