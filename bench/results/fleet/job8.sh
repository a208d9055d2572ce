#!/usr/bin/env bash
# One GPU, a few minutes: (1) the kernels cuDNN and FLASH launch for the FlashAttention
# rows still below cuDNN (kernels/flash_attn_hopper2/sdpa_kernels.py: grid, block,
# registers, shared memory, time); (2) the dual GEMM's tuner on the two large benchmark
# problems no record was tuned on (1024 x 4096 x 7168, 2048 x 7168 x 4096: best() answered
# them from the nearest record), then kernels/dual_gemm_silu/bench.py with the records.
# Needs .gpu/bin/kart, .gpu/bin/dual_gemm_silu and the store in .gpu/store.tgz. Logs and
# kart.tune as it ends up go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$PWD/.gpu/bin
export CARGO_MANIFEST_DIR=$PWD PATH="$B:$PATH"
{
echo "commit $(cat .gpu/COMMIT 2>/dev/null || git rev-parse HEAD)"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
sha256sum .gpu/bin/*
rm -rf artifacts; tar -xzf .gpu/store.tgz && mv store artifacts

# 1. The vendor's kernels for the rows below cuDNN, and two rows above it for contrast.
timeout 120 python3 kernels/flash_attn_hopper2/sdpa_kernels.py \
  8 16 512 128 0  32 32 512 128 1  8 16 512 128 1  32 32 512 128 0  8 16 2048 128 0 > $OUT/sdpa-kernels.log 2>&1
echo "sdpa kernels exit $?"; cat $OUT/sdpa-kernels.log

# 2. The tuner over both dual GEMM kernels on the two large problems, then the benchmark.
( time timeout 300 $B/dual_gemm_silu tune 1024x4096x7168 2048x7168x4096 ) > $OUT/dual-tune.log 2>&1
echo "tune exit $?"; grep -E "^problem|best:|written|real" $OUT/dual-tune.log
W=$(mktemp -d)
$B/kart export --python -o $W/dual_gemm_kernels.py dual_gemm_silu --all-configs 2>&1 | tail -n 1
timeout 150 python3 kernels/dual_gemm_silu/bench.py $W/dual_gemm_kernels.py > $OUT/dual-bench.log 2>&1
echo "bench exit $?"; cat $OUT/dual-bench.log
cp kart.tune $OUT/
git diff --stat -- kart.tune 2>/dev/null || true
} > $OUT/job.log 2>&1
tail -n 80 $OUT/job.log
