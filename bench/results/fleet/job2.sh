#!/usr/bin/env bash
# Part 2, in one process tree: the FlashAttention and dual-GEMM checks with tracing on
# (from the store), `kart bundle --trace` of what they ran, then the same checks loading
# only from that bundle (the store moved away), then the exported Python module traced.
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/.gpu/bin
export CARGO_MANIFEST_DIR=$PWD PATH="$B:$PATH"
echo "commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
W=$(mktemp -d)
cp kart.attest $W/kart.attest.before
trap 'cp $W/kart.attest.before kart.attest' EXIT
KART_TRACE=$W/trace.jsonl timeout 200 $B/flash_attn check > $W/fa-store.log 2>&1; echo "flash_attn check (store, traced) exit $?"; tail -n 1 $W/fa-store.log
KART_TRACE=$W/trace.jsonl timeout 150 $B/dual_gemm_silu check > $W/dual-store.log 2>&1; echo "dual_gemm_silu check (store, traced) exit $?"; tail -n 1 $W/dual-store.log
echo "trace: $(wc -l < $W/trace.jsonl) lines, $(stat -c %s $W/trace.jsonl) bytes"; head -n 2 $W/trace.jsonl
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
printf '[[fleet]]\nname = "%s"\ncapability = "9.0"\n' "$name" > $W/fleet.toml
$B/kart bundle --fleet $W/fleet.toml --trace $W/trace.jsonl -o $W/traced.kartbundle 2>&1
$B/kart bundle --inspect $W/traced.kartbundle > $OUT/bundle-inspect.log 2>&1; cat $OUT/bundle-inspect.log
sha256sum $W/traced.kartbundle
mv artifacts $W/artifacts.away
trap 'mv $W/artifacts.away artifacts; cp $W/kart.attest.before kart.attest' EXIT
echo "store moved away: $(ls -d artifacts 2>&1)"
( time KART_BUNDLE=$W/traced.kartbundle timeout 200 $B/flash_attn check ) > $OUT/flash_attn-check-bundle.log 2>&1; echo "flash_attn check (bundle) exit $?"; tail -n 4 $OUT/flash_attn-check-bundle.log
( time KART_BUNDLE=$W/traced.kartbundle timeout 150 $B/dual_gemm_silu check ) > $OUT/dual_gemm_silu-check-bundle.log 2>&1; echo "dual_gemm_silu check (bundle) exit $?"; tail -n 4 $OUT/dual_gemm_silu-check-bundle.log
# Same verdicts, config by config, from the store and from the bundle.
for k in fa dual; do
  f=flash_attn; [[ $k == dual ]] && f=dual_gemm_silu
  diff <(grep -E '^\s+(ok|FAIL)' $W/$k-store.log | awk '{print $1, $2}') <(grep -E '^\s+(ok|FAIL)' $OUT/$f-check-bundle.log | awk '{print $1, $2}') > /dev/null && echo "$f: every config's verdict the same from the store and the bundle ($(grep -cE '^\s+(ok|FAIL)' $W/$k-store.log) lines)" || echo "$f: verdicts DIFFER"
done
mv $W/artifacts.away artifacts; trap 'cp $W/kart.attest.before kart.attest' EXIT
$B/kart export --python -o $W/fk.py flash_attn --all-configs --target sm_90 2>&1 | tail -n 1
( KART_TRACE=$OUT/py-trace.jsonl timeout 150 python3 tests/python/gpu_flash_attn.py $W/fk.py ) > $OUT/python-trace.log 2>&1; echo "python exit $?"; tail -n 3 $OUT/python-trace.log
echo "python trace lines: $(wc -l < $OUT/py-trace.jsonl)"; head -n 2 $OUT/py-trace.jsonl
$B/kart coverage flash_attn --fleet $W/fleet.toml --trace $OUT/py-trace.jsonl > $OUT/coverage-py-trace.log 2>&1; echo "coverage exit $?"; head -n 12 $OUT/coverage-py-trace.log
