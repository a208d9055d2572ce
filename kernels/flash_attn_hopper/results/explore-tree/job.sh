#!/bin/bash
# Exploration: OSTORE 1/2 (8- or 16-byte O stores), TREE (four partial max/sum chains), EARLY (O rescaled under S).
echo "== commit $(git rev-parse HEAD) + working tree"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
.gpu/bin/kart export --python -o .gpu/fa.py flash_attn --all-configs --target sm_90 --target sm_90a 2>&1
python3 kernels/flash_attn_hopper/bench.py check .gpu/fa.py > $OUT/fa-check.log 2>&1; tail -1 $OUT/fa-check.log
python3 kernels/flash_attn_hopper/bench.py bench .gpu/fa.py --runs 30 --by OSTORE,TREE,EARLY > $OUT/fa-bench.log 2>&1; tail -3 $OUT/fa-bench.log
for C in OSTORE=2,TREE=1,EARLY=1 OSTORE=1,TREE=0,EARLY=0; do
C=BLOCK_N=128,CONSUMERS=2,STAGES=3,PIPELINE=1,PINGPONG=1,WIDE=0,CARRY=0,EXP=1,$C
timeout 120 ncu --clock-control none --kernel-name regex:kart_flash_attn_fwd --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis -o $OUT/fa-stalls python3 kernels/flash_attn_hopper/bench.py run .gpu/fa.py --config $C \
  --problem 32,32,512,128,0 --runs 3 > /dev/null 2>&1
echo "== $C" >> $OUT/fa-stalls.log; ncu -i $OUT/fa-stalls.ncu-rep >> $OUT/fa-stalls.log 2>&1
ncu -i $OUT/fa-stalls.ncu-rep --page source --print-source sass --csv > $OUT/sass.csv 2>&1
echo "== $C" >> $OUT/stall-summary.log; python3 bench/ncu_stalls.py $OUT/sass.csv >> $OUT/stall-summary.log 2>&1
rm -f $OUT/fa-stalls.ncu-rep $OUT/sass.csv
done
grep -E "^==|Duration|stall_wait|stall_barrier|stall_selected" $OUT/fa-stalls.log $OUT/stall-summary.log
