#!/usr/bin/env bash
# The README's first command on a cold store: the repository's kernels built from the
# commit's tree into an empty store, once with every config compiled alone
# (`--batch 1`, how kart built before batching) and once as kart chooses, in one run on
# one machine. Prints wall time, CPU seconds (user + system of kart and its nvcc
# processes), CPU seconds per template (CuTe/CUTLASS) config, and checks that both
# builds give exactly the digests of the committed kart.lock.
# Usage, after scripts/setup: bench/cold_build.sh [KERNEL...]   (default: every kernel)
# KART_BENCH_MODES="batched" runs only the build as kart chooses (default: "alone batched").
set -euo pipefail
cd "$(dirname "$0")/.."
kart=$PWD/target/release/kart
commit=$(git rev-parse --short HEAD)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "commit $commit; $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "kernels: ${*:-all}"
template_configs=$(python3 - "$@" <<'EOF'
import sys, tomllib
lock = tomllib.load(open("kart.lock", "rb"))
wanted = set(sys.argv[1:])
n = sum(1 for a in lock["artifact"]
        if (not wanted or a["kernel"] in wanted)
        and any(e.get("template") for e in a.get("entries", [])))
print(n)
EOF
)
for mode in ${KART_BENCH_MODES:-alone batched}; do
  tree=$work/$mode
  mkdir -p "$tree"
  git archive HEAD | tar -x -C "$tree"
  args=()
  [[ $mode == alone ]] && args=(--batch 1)
  start=$(date +%s.%N)
  # CPU time of kart and every process it waited for (nvcc, cicc, ptxas).
  /usr/bin/time -f "%U %S" -o "$work/$mode.cpu" \
    "$kart" -C "$tree" -q build "${args[@]}" "$@" > "$work/$mode.log" 2>&1 || {
      cat "$work/$mode.log"; exit 1; }
  end=$(date +%s.%N)
  read -r user sys < "$work/$mode.cpu"
  python3 - "$mode" "$start" "$end" "$user" "$sys" "$template_configs" <<'EOF'
import sys
mode, start, end, user, sys_t, n = sys.argv[1], *map(float, sys.argv[2:6]), int(sys.argv[6])
wall = end - start
print(f"{mode}: wall {wall:.1f} s ({wall / 60:.1f} min), CPU {user + sys_t:.0f} s")
EOF
  echo "$mode $(awk '{print $1 + $2}' "$work/$mode.cpu") $start $end" >> "$work/figures"
  # The lock the build wrote names the committed lock's digests, artifact for artifact.
  python3 - "$tree/kart.lock" "$@" <<'EOF'
import sys, tomllib
built = {(a["kernel"], tuple(sorted(a["config"].items())), a["target"], a["kind"]): a["digest"]
         for a in tomllib.load(open(sys.argv[1], "rb"))["artifact"]}
locked = {(a["kernel"], tuple(sorted(a["config"].items())), a["target"], a["kind"]): a["digest"]
          for a in tomllib.load(open("kart.lock", "rb"))["artifact"]
          if not sys.argv[2:] or a["kernel"] in sys.argv[2:]}
same = sum(1 for k, d in locked.items() if built.get(k) == d)
print(f"  digests equal to the committed kart.lock: {same} of {len(locked)}")
sys.exit(0 if same == len(locked) else 1)
EOF
done
python3 - "$work/figures" "$template_configs" <<'EOF'
import sys
rows = {}
if len(open(sys.argv[1]).read().splitlines()) < 2:
    sys.exit(0)
for line in open(sys.argv[1]):
    mode, cpu, start, end = line.split()
    rows[mode] = (float(end) - float(start), float(cpu))
(wa, ca), (wb, cb) = rows["alone"], rows["batched"]
n = int(sys.argv[2])
print(f"batched vs alone: wall {wa / wb:.2f}x faster, CPU {ca / cb:.2f}x less")
if n:
    print(f"{n} artifacts of template kernels; if they were all that was built, CPU per "
          f"config: alone {ca / n:.1f} s, batched {cb / n:.1f} s")
EOF
