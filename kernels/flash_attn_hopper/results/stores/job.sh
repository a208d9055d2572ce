#!/bin/bash
# The committed kernel: GPU tests, check and tune from Rust (kart.attest, kart.tune), demo, benchmark, ncu.
hdr() { echo "== commit $(git rev-parse HEAD)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; }
hdr > $OUT/gpu-tests.log; timeout 240 bash .gpu/run >> $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log
hdr > $OUT/fa-check.log; .gpu/bin/flash_attn check >> $OUT/fa-check.log 2>&1; tail -2 $OUT/fa-check.log
hdr > $OUT/fa-tune.log; .gpu/bin/flash_attn tune >> $OUT/fa-tune.log 2>&1; tail -2 $OUT/fa-tune.log
hdr > $OUT/fa-demo.log; .gpu/bin/flash_attn demo >> $OUT/fa-demo.log 2>&1; tail -2 $OUT/fa-demo.log
cp kart.tune kart.attest $OUT/
hdr > $OUT/fa-bench.log
.gpu/bin/kart export --python -o .gpu/fa.py flash_attn --all-configs --target sm_90 --target sm_90a >> $OUT/fa-bench.log 2>&1
python3 kernels/flash_attn_hopper/bench.py bench .gpu/fa.py --runs 30 >> $OUT/fa-bench.log 2>&1; tail -3 $OUT/fa-bench.log
C=BLOCK_N=128,CONSUMERS=2,STAGES=3,PIPELINE=1,PINGPONG=1,WIDE=0,CARRY=0,TREE=0
hdr > $OUT/fa-ncu.log
timeout 120 ncu --clock-control none --kernel-name regex:kart_flash_attn_fwd --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis -o $OUT/fa-stalls python3 kernels/flash_attn_hopper/bench.py run .gpu/fa.py --config $C \
  --problem 32,32,512,128,0 --runs 3 >> $OUT/fa-ncu.log 2>&1
ncu -i $OUT/fa-stalls.ncu-rep >> $OUT/fa-ncu.log 2>&1
ncu -i $OUT/fa-stalls.ncu-rep --page source --print-source sass --csv > $OUT/sass.csv 2>&1
python3 bench/ncu_stalls.py $OUT/sass.csv >> $OUT/fa-ncu.log 2>&1
rm -f $OUT/fa-stalls.ncu-rep $OUT/sass.csv
grep -E "Duration|stall_wait|stall_barrier" $OUT/fa-ncu.log
