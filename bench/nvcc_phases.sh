#!/usr/bin/env bash
# Where a cold build's time goes: nvcc's own phase table (`--time`, through
# KART_NVCC_TIME) for a sample of about 8 configs of every kernel (one `--shard` of
# each), built from the commit's tree into an empty store, once with every config alone
# (`--batch 1`) and once as kart chooses, on one core (`-j 1`, so phases do not compete).
# Prints, per kernel and mode, the milliseconds per config of each phase, and checks
# that every artifact built has the digest of the committed kart.lock.
# Usage, after scripts/setup: bench/nvcc_phases.sh
set -euo pipefail
cd "$(dirname "$0")/.."
kart=$PWD/target/release/kart
commit=$(git rev-parse --short HEAD)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "commit $commit; $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); -j 1"
# kernel and shard count: about 8 configs of each (the shard is round-robin over the
# sorted selection, so a sample across the grid).
samples="smoke:1 flash_attn:11 sgemm:21 cute_gemm:1 dual_gemm_silu:6 flash_attn_hopper:21"
for mode in alone batched; do
  tree=$work/$mode
  mkdir -p "$tree" "$work/times-$mode"
  git archive HEAD | tar -x -C "$tree"
  args=(-j 1)
  [[ $mode == alone ]] && args+=(--batch 1)
  start=$(date +%s.%N)
  for s in $samples; do
    kernel=${s%%:*} shards=${s##*:}
    KART_NVCC_TIME=$work/times-$mode "$kart" -C "$tree" -q build "$kernel" \
      --shard "1/$shards" "${args[@]}" >> "$work/$mode.log" 2>&1 || { cat "$work/$mode.log"; exit 1; }
  done
  end=$(date +%s.%N)
  echo "$mode: wall $(python3 -c "print(f'{$end - $start:.1f}')") s"
  # Every entry the build stored names the committed lock's digest for its artifact.
  python3 - "$tree/artifacts/v1/actions" <<'EOF'
import json, pathlib, sys, tomllib
lock = {(a["kernel"], json.dumps(a["config"], sort_keys=True), a["target"], a["kind"]): a["digest"]
        for a in tomllib.load(open("kart.lock", "rb"))["artifact"]}
entries = [json.loads(p.read_text()) for p in pathlib.Path(sys.argv[1]).rglob("*.json")]
same = sum(1 for e in entries
           if lock.get((e["kernel"], json.dumps(e["config"], sort_keys=True), e["target"], e["kind"])) == e["digest"])
print(f"  digests equal to the committed kart.lock: {same} of {len(entries)}")
sys.exit(0 if same == len(entries) and entries else 1)
EOF
done
python3 - "$work" <<'EOF'
import collections, pathlib, sys
work = pathlib.Path(sys.argv[1])
def phase(name):
    name = name.strip()
    if name.startswith("gcc (preprocessing"): return "preprocess"
    if name in ("cicc", "ptxas"): return name
    return "other"
# (kernel, mode) -> phase -> ms; configs; batch sizes
ms = collections.defaultdict(lambda: collections.defaultdict(float))
configs = collections.Counter()
sizes = collections.defaultdict(set)
for mode in ("alone", "batched"):
    for f in sorted((work / f"times-{mode}").glob("*.csv")):
        kernel, how, n, _, _ = f.name.split(".")
        configs[(kernel, mode)] += int(n)
        sizes[(kernel, mode)].add(int(n))
        for line in f.read_text().splitlines():
            cols = [c.strip() for c in line.split(",")]
            if len(cols) < 8 or cols[7] != "ms":
                continue
            ms[(kernel, mode)][phase(cols[1])] += float(cols[6])
phases = ["preprocess", "cicc", "ptxas", "other"]
print(f"\n{'kernel':18} {'mode':8} {'configs':>7} {'batch':>6} " +
      " ".join(f"{p:>10}" for p in phases) + f" {'total':>9}   ms per config")
totals = {}
for (kernel, mode) in sorted(configs, key=lambda k: (k[0], k[1])):
    n = configs[(kernel, mode)]
    per = {p: ms[(kernel, mode)][p] / n for p in phases}
    total = sum(per.values())
    totals[(kernel, mode)] = total
    batch = "/".join(str(s) for s in sorted(sizes[(kernel, mode)]))
    print(f"{kernel:18} {mode:8} {n:7} {batch:>6} " + " ".join(f"{per[p]:10.0f}" for p in phases) + f" {total:9.0f}")
print()
for kernel in sorted({k for k, _ in configs}):
    a, b = totals.get((kernel, "alone")), totals.get((kernel, "batched"))
    if a and b:
        print(f"{kernel:18} batched vs alone: {a / b:.2f}x less compile time per config")
EOF
