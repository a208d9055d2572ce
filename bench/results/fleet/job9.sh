#!/usr/bin/env bash
# The grouped tile order of the FP8 dual GEMM + SiLU (kernels/dual_gemm_silu_grouped), on
# one GPU, in a few minutes: the float64 check of its configs (kart.attest), the tuner over
# the three kernels on the problems of many output tiles (kart.tune), then
# kernels/dual_gemm_silu/bench.py with best() choosing among them.
# Needs .gpu/bin/kart, .gpu/bin/dual_gemm_silu and the store in .gpu/store.tgz. Logs, and
# kart.attest and kart.tune as they end up, go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$PWD/.gpu/bin
export CARGO_MANIFEST_DIR=$PWD PATH="$B:$PATH"
{
echo "commit $(cat .gpu/COMMIT 2>/dev/null || git rev-parse HEAD)"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
sha256sum .gpu/bin/*
rm -rf artifacts; tar -xzf .gpu/store.tgz && mv store artifacts
$B/kart ls dual_gemm_silu_grouped

# 1. Every config of the variant against float64 (shapes with tails in M and N).
( time timeout 120 $B/dual_gemm_silu check dual_gemm_silu_grouped ) > $OUT/grouped-check.log 2>&1
echo "check exit $?"; grep -cE '^\s+ok' $OUT/grouped-check.log | sed 's/^/  configs ok: /'; grep -E "FAIL|correct," $OUT/grouped-check.log

# 2. The tuner over the three kernels on the problems of many output tiles.
( time timeout 300 $B/dual_gemm_silu tune 1024x4096x7168 2048x7168x4096 512x4096x7168 512x3072x7168 4608x384x7168 ) > $OUT/grouped-tune.log 2>&1
echo "tune exit $?"; grep -E "^problem|best:|written|real" $OUT/grouped-tune.log

# 3. The benchmark with the records just written.
W=$(mktemp -d)
$B/kart export --python -o $W/dual_gemm_kernels.py dual_gemm_silu --all-configs 2>&1 | tail -n 1
timeout 150 python3 kernels/dual_gemm_silu/bench.py $W/dual_gemm_kernels.py > $OUT/grouped-bench.log 2>&1
echo "bench exit $?"; cat $OUT/grouped-bench.log
cp kart.attest kart.tune $OUT/
git diff --stat -- kart.attest kart.tune 2>/dev/null || true
} > $OUT/job.log 2>&1
tail -n 60 $OUT/job.log
