#!/usr/bin/env bash
# After the test files were split by theme: the GPU tests again, the FlashAttention
# comparison against PyTorch's SDPA backends from kart.tune's records for this GPU, and,
# where kart.tune has no sgemm record for this GPU, the sgemm check and tuner. kart.attest
# and kart.tune as they end up are copied to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$PWD/.gpu/bin
export CARGO_MANIFEST_DIR=$PWD PATH="$B:$PATH"
echo "commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
sha256sum .gpu/bin/* .gpu/tests/*
rm -rf artifacts; tar -xzf .gpu/store.tgz && mv store artifacts
W=$(mktemp -d)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
timeout 240 bash .gpu/run > $OUT/gpu-tests.log 2>&1; echo "gpu tests exit $?"; grep -E "^=== |^test result|overall|skipped" $OUT/gpu-tests.log | tail -n 8
if ! grep -A1 'kernel = "sgemm"' kart.tune | grep -q "gpu = \"$name\""; then
  ( time timeout 150 $B/sgemm check ) > $OUT/sgemm-check.log 2>&1; echo "sgemm check exit $?"; tail -n 4 $OUT/sgemm-check.log
  ( time timeout 200 $B/sgemm tune ) > $OUT/sgemm-tune.log 2>&1; echo "sgemm tune exit $?"; grep -E "best:|written" $OUT/sgemm-tune.log
else
  echo "kart.tune has sgemm records for $name: no tuning"
fi
$B/kart export --python -o $W/flash_kernels.py flash_attn --all-configs 2>&1 | tail -n 1
timeout 240 python3 kernels/flash_attn/bench_vs_sdpa.py --module $W/flash_kernels.py --runs 30 > $OUT/fa-bench.log 2>&1; echo "fa bench exit $?"; cat $OUT/fa-bench.log
cp kart.attest kart.tune $OUT/
