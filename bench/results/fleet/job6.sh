#!/usr/bin/env bash
# The split-K variant of the FP8 dual GEMM + SiLU (kernels/dual_gemm_silu_splitk), on one
# GPU, in about 6 minutes: the float64 check of every split-K config (kart.attest), the
# accuracy sweep of the split-K configs on the long-K shapes against cuBLAS, the same
# output bits on repeated runs (the fixed reduction order), the tuner over both kernels on
# the problems with few output tiles (kart.tune), then the benchmark on its 4 shapes and
# the 4 more (128 x 2048 x 7168 first) with best() choosing between the kernels, and the
# variant's GPU test where the GPU test binary is carried in .gpu/tests.
# Needs .gpu/bin/kart and .gpu/bin/dual_gemm_silu (cargo build --release --example
# dual_gemm_silu) and the store with the split-K cubins in .gpu/store.tgz. Logs, and
# kart.attest and kart.tune as they end up, go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$PWD/.gpu/bin
export CARGO_MANIFEST_DIR=$PWD PATH="$B:$PATH"
echo "commit $(cat .gpu/COMMIT 2>/dev/null || git rev-parse HEAD)"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
sha256sum .gpu/bin/* .gpu/tests/* 2>/dev/null
rm -rf artifacts; tar -xzf .gpu/store.tgz && mv store artifacts
W=$(mktemp -d)
$B/kart ls dual_gemm_silu_splitk > $OUT/splitk-ls.log 2>&1; cat $OUT/splitk-ls.log

# 1. Correctness of every split-K config against float64 (shapes with tails, K = 16 with
#    more splits than k-tiles, K = 7168).
( time timeout 90 $B/dual_gemm_silu check dual_gemm_silu_splitk ) > $OUT/splitk-check.log 2>&1
echo "split-K check exit $?"; grep -cE '^\s+ok' $OUT/splitk-check.log | sed 's/^/  configs ok: /'; grep -E "FAIL|correct," $OUT/splitk-check.log

# 2. Accuracy on the long-K shapes, the split-K configs against cuBLAS on the same inputs.
$B/kart export --python -o $W/dual_gemm_kernels.py dual_gemm_silu --all-configs 2>&1 | tail -n 1
timeout 90 python3 kernels/dual_gemm_silu/accuracy.py $W/dual_gemm_kernels.py dual_gemm_silu_splitk > $OUT/splitk-accuracy.log 2>&1
echo "accuracy exit $?"; cat $OUT/splitk-accuracy.log

# 3. The same bits on every run: each split-K config 5 times on 128 x 2048 x 7168.
timeout 60 python3 - $W/dual_gemm_kernels.py > $OUT/splitk-determinism.log 2>&1 <<'PY'
import importlib.util, os, sys
import torch
sys.path.insert(0, os.path.join("examples", "python", "dual_gemm"))
from common import make_inputs
spec = importlib.util.spec_from_file_location("kernels", sys.argv[1])
kernels = importlib.util.module_from_spec(spec); spec.loader.exec_module(kernels)
m, n, k = 128, 2048, 7168
a, b1, b2, sa, sb1, sb2, c = make_inputs(m, n, k, torch.Generator(device="cuda").manual_seed(3))
same = 0
configs = kernels.kernels()["dual_gemm_silu_splitk"]
for config in configs:
    launcher = kernels.load("dual_gemm_silu_splitk", **config)
    maps = [kernels.tensor_map(t, tile=(config[side], 128), swizzle=128) for t, side in ((a, "BM"), (b1, "BN"), (b2, "BN"))]
    outs = []
    for _ in range(5):
        c.fill_(float("nan"))
        launcher.launch(*maps, sa, sb1, sb2, c, m, n, k, problem=dict(M=m, N=n, K=k))
        outs.append(c.view(torch.int16).clone())
    ok = all(torch.equal(outs[0], o) for o in outs[1:])
    same += ok
    print(f"  {kernels._config_text(config):40s} {'same bits' if ok else 'DIFFERENT bits'} in 5 runs")
print(f"{same} of {len(configs)} split-K configs gave the same bits on every run")
PY
echo "determinism exit $?"; tail -n 1 $OUT/splitk-determinism.log

# 4. The tuner over both kernels on the problems with few output tiles (the others keep
#    their records: they fill the GPU without splitting K).
( time timeout 240 $B/dual_gemm_silu tune 128x2048x7168 128x4096x7168 256x4096x7168 256x3072x4096 512x768x7168 ) > $OUT/dual-tune.log 2>&1
echo "tune exit $?"; grep -E "^problem|best:|written|real" $OUT/dual-tune.log

# 5. The benchmark with the records just written (best() chooses between the kernels).
$B/kart export --python -o $W/dual_gemm_kernels.py dual_gemm_silu --all-configs 2>&1 | tail -n 1
timeout 150 python3 kernels/dual_gemm_silu/bench.py $W/dual_gemm_kernels.py > $OUT/dual-bench.log 2>&1
echo "bench exit $?"; cat $OUT/dual-bench.log
# 6. The GPU test of the variant (base and split-K bit for bit), where the GPU test
#    binary is carried in .gpu/tests (cargo test --release --no-run --test gpu).
for t in .gpu/tests/gpu-*; do
  [[ -x $t ]] || continue
  KART_REQUIRE_GPU=1 timeout 90 $t split_k > $OUT/gpu-test-splitk.log 2>&1; echo "gpu test split_k exit $?"; tail -n 4 $OUT/gpu-test-splitk.log
done
cp kart.attest kart.tune $OUT/
git diff --stat -- kart.attest kart.tune 2>/dev/null || true
