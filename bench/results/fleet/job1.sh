#!/usr/bin/env bash
# Part 1: GPU tests, the trace's cost, the FlashAttention and dual-GEMM checks with
# tracing on (loading from the store), then a bundle of what they traced.
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/.gpu/bin
export CARGO_MANIFEST_DIR=$PWD PATH="$B:$PATH"
echo "commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
sha256sum .gpu/bin/*
$B/kart build --locked 2>&1 | tail -2
timeout 200 bash .gpu/run > $OUT/gpu-tests.log 2>&1; echo "gpu tests exit $?"; tail -n 4 $OUT/gpu-tests.log
timeout 120 $B/kart-bench-trace 3 > $OUT/trace-cost.log 2>&1; echo "trace bench exit $?"; cat $OUT/trace-cost.log
rm -f $OUT/trace.jsonl
cp kart.attest $OUT/kart.attest.before
( time KART_TRACE=$OUT/trace.jsonl timeout 200 $B/flash_attn check ) > $OUT/flash_attn-check-store.log 2>&1; echo "flash_attn check (store) exit $?"; tail -n 3 $OUT/flash_attn-check-store.log
( time KART_TRACE=$OUT/trace.jsonl timeout 150 $B/dual_gemm_silu check ) > $OUT/dual_gemm_silu-check-store.log 2>&1; echo "dual check (store) exit $?"; tail -n 3 $OUT/dual_gemm_silu-check-store.log
cp kart.attest.before kart.attest 2>/dev/null || cp $OUT/kart.attest.before kart.attest
echo "trace lines: $(wc -l < $OUT/trace.jsonl)"; python3 -c "
import json,collections,sys
c=collections.Counter(json.loads(l)['event'] for l in open(sys.argv[1]))
print(dict(c))" $OUT/trace.jsonl
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1)
printf '[[fleet]]\nname = "%s"\ncapability = "%s"\n' "$name" "$cap" > $OUT/fleet.toml
$B/kart coverage --fleet $OUT/fleet.toml --trace $OUT/trace.jsonl > $OUT/coverage-trace.log 2>&1; echo "coverage exit $?"; head -n 20 $OUT/coverage-trace.log
$B/kart bundle --fleet $OUT/fleet.toml --trace $OUT/trace.jsonl -o $OUT/traced.kartbundle 2>&1
$B/kart bundle --fleet $OUT/fleet.toml -o $OUT/fleet.kartbundle 2>&1
$B/kart bundle --inspect $OUT/traced.kartbundle > $OUT/bundle-inspect.log 2>&1; cat $OUT/bundle-inspect.log
ls -la $OUT
