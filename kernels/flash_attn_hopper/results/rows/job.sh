#!/bin/bash
# The committed kernel: GPU tests, check and tune from Rust (kart.attest, kart.tune), demo, benchmark,
# then ncu of the eight large S = 512 rows (the benchmark's fastest Hopper config of each, and cuDNN).
hdr() { echo "== commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; }
hdr > $OUT/gpu-tests.log; timeout 240 bash .gpu/run >> $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log
hdr > $OUT/fa-check.log; .gpu/bin/flash_attn check >> $OUT/fa-check.log 2>&1; tail -2 $OUT/fa-check.log
hdr > $OUT/fa-tune.log; .gpu/bin/flash_attn tune >> $OUT/fa-tune.log 2>&1; tail -2 $OUT/fa-tune.log
hdr > $OUT/fa-demo.log; .gpu/bin/flash_attn demo >> $OUT/fa-demo.log 2>&1; tail -2 $OUT/fa-demo.log
cp kart.tune kart.attest $OUT/
hdr > $OUT/fa-bench.log; echo "command: python3 kernels/flash_attn_hopper/bench.py bench .gpu/fa.py --runs 30" >> $OUT/fa-bench.log
.gpu/bin/kart export --python -o .gpu/fa.py flash_attn --all-configs --target sm_90 --target sm_90a >> $OUT/fa-bench.log 2>&1
python3 kernels/flash_attn_hopper/bench.py bench .gpu/fa.py --runs 30 >> $OUT/fa-bench.log 2>&1; tail -3 $OUT/fa-bench.log
hdr > $OUT/fa-ncu-rows.log
S="--section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy"
while read problem config; do
  echo "===== row $problem hopper $config" >> $OUT/fa-ncu-rows.log
  timeout 100 ncu --clock-control none --kernel-name regex:kart_flash_attn_fwd --launch-skip 2 --launch-count 1 $S \
    python3 kernels/flash_attn_hopper/bench.py run .gpu/fa.py --config $config --problem $problem --runs 3 < /dev/null >> $OUT/fa-ncu-rows.log 2>&1
  echo "===== row $problem cuDNN" >> $OUT/fa-ncu-rows.log
  timeout 100 ncu --clock-control none --launch-skip 2 --launch-count 1 $S \
    python3 kernels/flash_attn_hopper/bench.py run .gpu/fa.py --backend CUDNN_ATTENTION --problem $problem --runs 3 < /dev/null >> $OUT/fa-ncu-rows.log 2>&1
done <<'ROWS'
32,32,512,64,0 BLOCK_N=128,CARRY=0,CONSUMERS=3,PINGPONG=1,PIPELINE=1,STAGES=3,TREE=0,WIDE=0
32,32,512,64,1 BLOCK_N=128,CARRY=1,CONSUMERS=2,PINGPONG=1,PIPELINE=1,STAGES=3,TREE=1,WIDE=0
32,32,512,128,0 BLOCK_N=128,CARRY=0,CONSUMERS=2,PINGPONG=0,PIPELINE=1,STAGES=3,TREE=0,WIDE=1
32,32,512,128,1 BLOCK_N=128,CARRY=0,CONSUMERS=2,PINGPONG=1,PIPELINE=1,STAGES=3,TREE=1,WIDE=1
8,16,512,64,0 BLOCK_N=128,CARRY=0,CONSUMERS=1,PINGPONG=0,PIPELINE=1,STAGES=2,TREE=0,WIDE=0
8,16,512,64,1 BLOCK_N=128,CARRY=0,CONSUMERS=2,PINGPONG=1,PIPELINE=1,STAGES=3,TREE=1,WIDE=0
8,16,512,128,0 BLOCK_N=128,CARRY=0,CONSUMERS=2,PINGPONG=1,PIPELINE=1,STAGES=3,TREE=0,WIDE=1
8,16,512,128,1 BLOCK_N=128,CARRY=0,CONSUMERS=2,PINGPONG=1,PIPELINE=1,STAGES=3,TREE=1,WIDE=1
ROWS
grep -E "^=====|^  [a-z_A-Z].*\(|Duration|Compute \(SM\) Th|Issue Slots Busy|DRAM Throughput|L2 Cache Throughput|highest-utilized|Achieved Occupancy" $OUT/fa-ncu-rows.log | head -150
