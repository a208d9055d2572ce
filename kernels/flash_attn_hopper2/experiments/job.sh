#!/usr/bin/env bash
# Experimental variants of kernels/flash_attn_hopper2 measured on one GPU. To run: copy
# kernels/flash_attn_hopper2's kernel.toml and flash_attn_hopper2.cu (as
# flash_attn_hopper3.cu) into a new folder kernels/flash_attn_hopper3, apply one of
# experiments/*.patch there (each against the kernel at the commit its log names) (`patch -p1 -d kernels/flash_attn_hopper3 < PATCH`), copy this
# file and exp.py into the new folder, build it (`kart build flash_attn_hopper3`). Then:
# the SASS counts of its wgmma and ldmatrix, its lock records,
# the float64 check of every config (kart.attest), exp.py's interleaved timing against
# the second kernel and cuDNN, and ncu of the three on 8 x 16 x 512 x 128 non-causal.
# Needs .gpu/bin/kart, .gpu/bin/flash_attn and .gpu/store.tgz (a folder `store` holding
# artifacts/); logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."  # run from its copy in kernels/flash_attn_hopper3/
B=$PWD/.gpu/bin
export CARGO_MANIFEST_DIR=$PWD PATH="$B:$PATH" PYTHONUNBUFFERED=1
hdr() { echo "commit $(tr "\n" " " < .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader; }
hdr; sha256sum .gpu/bin/kart .gpu/bin/flash_attn
rm -rf artifacts; tar -xzf .gpu/store.tgz && mv store artifacts
W=$(mktemp -d)
# The SASS of each config: wgmma, their waits, and Q's shared-memory loads.
{ hdr; $B/kart ls --json flash_attn_hopper3 | python3 -c "
import json, sys
for r in json.load(sys.stdin):
    print(r['digest'], ','.join(f'{k}={v}' for k, v in sorted(r['config'].items())))" |
  while read -r d c; do echo "$c"; cuobjdump -sass artifacts/v1/blobs/${d:0:2}/$d | grep -oE "HGMMA\.[^ ]*|WARPGROUP\.[A-Z]*|LDSM\.[^ ]*" | sort | uniq -c; done; } > $OUT/h3-sass.log 2>&1
{ hdr; $B/kart ls flash_attn_hopper3; } > $OUT/h3-ls.log 2>&1
{ hdr; time timeout 100 $B/flash_attn check --kernel flash_attn_hopper3; } > $OUT/h3-check.log 2>&1
echo "check exit $?"; grep -E "FAIL|configs correct|real" $OUT/h3-check.log
grep -q "configs correct" $OUT/h3-check.log || { echo "check did not finish"; exit 1; }
cp kart.attest $OUT/
$B/kart export --python -o $W/fa.py flash_attn --all-configs --target sm_90 --target sm_90a 2>&1 | tail -n 1
{ hdr; echo "command: python3 kernels/flash_attn_hopper3/exp.py fa.py --rounds ${ROUNDS:-5} --runs 10"
  time timeout 300 python3 kernels/flash_attn_hopper3/exp.py $W/fa.py --rounds ${ROUNDS:-5} --runs 10; } > $OUT/h3-exp.log 2>&1
echo "exp exit $?"; cat $OUT/h3-exp.log
{ hdr; timeout 150 ncu --clock-control none --kernel-name regex:"kart_flash_attn_fwd|sdpa" --launch-skip 0 --launch-count 11 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats --section Occupancy \
    --metrics sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
    python3 kernels/flash_attn_hopper3/exp.py $W/fa.py --ncu 8,16,512,128,0 --ncu-config "${NCU_CONFIG:-SCHED=0,STAGES=3,QBUF=1,QREG=1}"; } > $OUT/h3-ncu.log 2>&1
echo "ncu exit $?"; grep -E "^  [a-z_]|sm__cycles_active|Duration|DRAM Throughput|hit_rate|dram__bytes|hmma|Issue Slots Busy|L2 Cache Throughput" $OUT/h3-ncu.log | head -80
