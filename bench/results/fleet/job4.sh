#!/usr/bin/env bash
# From a fresh clone's build (every sgemm config and one config of each other kernel
# compiled again to the locked digests; the rest of the store carried as artifacts/):
# the GPU tests, every kernel exported to Python and preloaded, the GEMM programs'
# shared float64 check (sgemm, cute_gemm, dual_gemm_silu) on every config, then
# `kart smoke --all` (every cubin this GPU runs, loaded in a child process each) and,
# where kart.tune has no sgemm record for this GPU, the sgemm tuner. kart.attest and
# kart.tune as they end up are copied to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../.."
B=$PWD/.gpu/bin
export CARGO_MANIFEST_DIR=$PWD PATH="$B:$PATH"
part=${1:-1}
echo "commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
sha256sum .gpu/bin/* .gpu/tests/*
rm -rf artifacts; tar -xzf .gpu/store.tgz && mv store artifacts
W=$(mktemp -d)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
if [[ $part == 1 ]]; then
  timeout 240 bash .gpu/run > $OUT/gpu-tests.log 2>&1; echo "gpu tests exit $?"; grep -E "^test result|overall|skipped" $OUT/gpu-tests.log | tail -n 5
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
  for p in sgemm cute_gemm dual_gemm_silu; do
    ( time timeout 150 $B/$p check ) > $OUT/$p-check.log 2>&1; echo "$p check exit $?"; grep -cE '^\s+ok' $OUT/$p-check.log | sed 's/^/  configs ok: /'; tail -n 4 $OUT/$p-check.log
  done
else
  ( time timeout 300 $B/kart smoke --all ) > $OUT/smoke-all.log 2>&1; echo "smoke --all exit $?"; tail -n 5 $OUT/smoke-all.log
  if ! grep -A1 'kernel = "sgemm"' kart.tune | grep -q "gpu = \"$name\""; then
    ( time timeout 200 $B/sgemm tune ) > $OUT/sgemm-tune.log 2>&1; echo "sgemm tune exit $?"; grep -E "best:|written" $OUT/sgemm-tune.log
  else
    echo "kart.tune has sgemm records for $name: no tuning"
  fi
  # The vendor comparisons on this GPU, from kart.tune's records for it.
  $B/kart export --python -o $W/dual_gemm_kernels.py dual_gemm_silu --all-configs 2>&1 | tail -n 1
  timeout 200 python3 kernels/dual_gemm_silu/bench.py $W/dual_gemm_kernels.py > $OUT/dual-bench.log 2>&1; echo "dual bench exit $?"; tail -n 30 $OUT/dual-bench.log
  $B/kart export --python -o $W/flash_kernels.py flash_attn --all-configs 2>&1 | tail -n 1
  timeout 200 python3 kernels/flash_attn/bench_vs_sdpa.py --module $W/flash_kernels.py --runs 30 > $OUT/fa-bench.log 2>&1; echo "fa bench exit $?"; tail -n 30 $OUT/fa-bench.log
fi
cp kart.attest kart.tune $OUT/
git diff --stat -- kart.attest kart.tune 2>/dev/null || true
