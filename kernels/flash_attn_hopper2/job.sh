#!/usr/bin/env bash
# The second Hopper FlashAttention kernel (kernels/flash_attn_hopper2) on one GPU, in 5
# to 8 minutes: its lock records and resources, the float64 check of every one of its
# configs (kart.attest), its GPU test where the test binary is staged, the tuner over
# the whole family (kernels/flash_attn and both Hopper variants) on its 24 problems
# (kart.tune), best()'s pick of each checked and timed, then the benchmark of the family
# against cuDNN with best() choosing (the records just written), with each row's
# fastest config per LAZY and SCHED value.
# Needs .gpu/bin/kart and .gpu/bin/flash_attn (cargo build --release --example
# flash_attn) and a store holding the family's cubins in .gpu/store.tgz (a folder
# `store` holding artifacts/). Logs, and kart.attest and kart.tune as they end up, go to
# $OUT. The steps' time limits add up to under 10 minutes (run it with a 600 s limit).
# Correctness comes before any timing: a check that hangs (timeout) ends the job;
# a config found wrong is reported, and the tuner and the benchmark check each config
# again before they time it (the tuner never times a wrong one).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=$PWD/.gpu/bin
export CARGO_MANIFEST_DIR=$PWD PATH="$B:$PATH" PYTHONUNBUFFERED=1
hdr() { echo "commit $(cat .gpu/COMMIT 2>/dev/null || git rev-parse HEAD)"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader; }
hdr; sha256sum .gpu/bin/kart .gpu/bin/flash_attn
rm -rf artifacts; tar -xzf .gpu/store.tgz && mv store artifacts
W=$(mktemp -d)

# 0. The new kernel's lock records: registers, spills, local memory, whether each blob
#    is in the store.
{ hdr; $B/kart ls flash_attn_hopper2; } > $OUT/h2-ls.log 2>&1
echo "ls exit $?"; grep -cE "^flash_attn_hopper2 .* yes " $OUT/h2-ls.log | sed 's/^/  blobs in the store: /'

# 1. Every config of the new kernel against float64 (S in {1, 17, 128, 500, 512, 2048}
#    with batch x heads 3, and S = 500 with 80, where every block takes several work
#    items; D 64 and 128, causal or not, output poisoned): `correct` in kart.attest.
{ hdr; time timeout 100 $B/flash_attn check --kernel flash_attn_hopper2; } > $OUT/h2-check.log 2>&1
rc=$?; echo "check exit $rc"; grep -cE '^\s+ok' $OUT/h2-check.log | sed 's/^/  configs ok: /'
grep -E "FAIL|configs correct|real" $OUT/h2-check.log
if grep -q "^real" $OUT/h2-check.log && ! grep -q "configs correct" $OUT/h2-check.log; then
  echo "the check did not finish (timeout or crash): nothing is timed"; cp kart.attest $OUT/; exit 1
fi

# 1b. Every order of work against the first Hopper kernel on a problem of many work items
#     per block (bit for bit with LAZY 0), where the GPU test binary is carried in
#     .gpu/tests (cargo test --release --no-run --test gpu).
for t in .gpu/tests/gpu-*; do
  [[ -x $t ]] || continue
  KART_REQUIRE_GPU=1 timeout 60 $t causal_orders_of_flash_attn_hopper2 > $OUT/h2-gpu-test.log 2>&1
  echo "gpu test exit $?"; tail -n 9 $OUT/h2-gpu-test.log
done

# 2. The tuner over the whole family on the 24 problems: every config of each kernel
#    with the problem's D and causality, checked on a small batch, then timed (L2
#    flushed, median of 30); each problem's winner to kart.tune.
{ hdr; time timeout 240 $B/flash_attn tune; } > $OUT/h2-tune.log 2>&1
echo "tune exit $?"; grep -E "best:|written|real" $OUT/h2-tune.log

# 3. best()'s pick per problem from the records just written: checked, timed.
{ hdr; timeout 45 $B/flash_attn demo; } > $OUT/h2-demo.log 2>&1
echo "demo exit $?"; grep -cE "small-shape check ok" $OUT/h2-demo.log | sed 's/^/  picks checked ok: /'
cp kart.attest kart.tune $OUT/

# 4. The benchmark (module exported after the tune, so best() reads its records): both
#    Hopper kernels' fastest configs, best()'s pick, FLASH and cuDNN, L2 flushed, medians
#    of 30; under each row the new kernel's fastest per (LAZY, SCHED).
{ hdr; echo "command: python3 kernels/flash_attn_hopper2/bench.py fa.py --runs 30 --by LAZY,SCHED,QREG"
  $B/kart export --python -o $W/fa.py flash_attn --all-configs --target sm_90 --target sm_90a 2>&1 | tail -n 1
  time timeout 150 python3 kernels/flash_attn_hopper2/bench.py $W/fa.py --runs 30 --by LAZY,SCHED,QREG; } > $OUT/h2-bench.log 2>&1
echo "bench exit $?"; cat $OUT/h2-bench.log
