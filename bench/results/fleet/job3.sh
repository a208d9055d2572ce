#!/usr/bin/env bash
# From a fresh clone's own build (its store carried as artifacts/): the GPU tests, then
# every kernel of the lock loaded by kart (smoke --all, each cubin this GPU runs, in a
# child process) and exported to Python and loaded there (preload of every config).
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/.gpu/bin
export CARGO_MANIFEST_DIR=$PWD PATH="$B:$PATH"
echo "commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
sha256sum .gpu/bin/* .gpu/tests/*
W=$(mktemp -d)
cp kart.attest $W/kart.attest.before
trap 'cp $W/kart.attest.before kart.attest' EXIT
timeout 240 bash .gpu/run > $OUT/gpu-tests.log 2>&1; echo "gpu tests exit $?"; grep -E "^test |passed" $OUT/gpu-tests.log | tail -n 25
timeout 240 $B/kart smoke --all > $OUT/smoke-all.log 2>&1; echo "smoke --all exit $?"; tail -n 3 $OUT/smoke-all.log
for k in smoke flash_attn flash_attn_hopper sgemm cute_gemm dual_gemm_silu; do
  $B/kart export --python -o $W/$k.py $k --all-configs 2>&1 | tail -n 1
  timeout 120 python3 - "$W/$k.py" "$k" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("m", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
configs = sum(len(c) for c in m.kernels().values())
print(f"{sys.argv[2]}: exported {configs} configs of {', '.join(sorted(m.kernels()))}; preload loaded {m.preload()} (config, entry) pairs on this GPU")
PY
  echo "  exit $?"
done
