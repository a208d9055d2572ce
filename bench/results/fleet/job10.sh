#!/usr/bin/env bash
# Q in registers for the second Hopper FlashAttention kernel (QREG), on one GPU, in under
# ten minutes: kernels/flash_attn_hopper2/job.sh (the float64 check of its configs into
# kart.attest, its GPU test, the tuner over the family on its 24 problems into kart.tune,
# best()'s picks, the benchmark against cuDNN), then `kart smoke --all` (every cubin of
# the store loaded through the driver) and the staged GPU tests. The job's logs, the two
# records files and a tarball of the rest go to $OUT (the device returns few files).
# Needs .gpu/bin/kart, .gpu/bin/flash_attn, .gpu/tests/gpu-* and .gpu/store.tgz.
set -uo pipefail
cd "$(dirname "$0")/../../.."
bash kernels/flash_attn_hopper2/job.sh
{ echo "commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
  time timeout 120 .gpu/bin/kart smoke --all; } > $OUT/smoke-all.log 2>&1
echo "smoke --all exit $?"; tail -n 3 $OUT/smoke-all.log
timeout 240 bash .gpu/run > $OUT/gpu-tests.log 2>&1
echo "gpu tests exit $?"; grep -E "^test .*(FAIL|fail)|passed|overall" $OUT/gpu-tests.log
cp kart.attest kart.tune $OUT/
cd $OUT && tar -czf logs.tgz h2-ls.log h2-demo.log h2-gpu-test.log smoke-all.log gpu-tests.log && rm -f h2-ls.log h2-demo.log h2-gpu-test.log smoke-all.log gpu-tests.log
