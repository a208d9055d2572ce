#!/bin/bash
# ncu of PyTorch's cuDNN attention on the eight large S = 512 rows (its kernel by name; the
# inputs' randn kernels excluded).
{ echo "== commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $OUT/cudnn-ncu-rows.log
.gpu/bin/kart export --python -o .gpu/fa.py flash_attn --all-configs --target sm_90 --target sm_90a >> $OUT/cudnn-ncu-rows.log 2>&1
S="--section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy"
for problem in 32,32,512,64,0 32,32,512,64,1 32,32,512,128,0 32,32,512,128,1 8,16,512,64,0 8,16,512,64,1 8,16,512,128,0 8,16,512,128,1; do
  echo "===== row $problem cuDNN" >> $OUT/cudnn-ncu-rows.log
  timeout 100 ncu --clock-control none --kernel-name regex:'sdpa|fmha|attn|flash|fprop|cudnn' --launch-skip 2 --launch-count 1 $S \
    python3 kernels/flash_attn_hopper/bench.py run .gpu/fa.py --backend CUDNN_ATTENTION --problem $problem --runs 3 < /dev/null >> $OUT/cudnn-ncu-rows.log 2>&1
done
grep -E "^=====|^  [a-z_A-Z].*\(|Duration|Compute \(SM\) Th|Issue Slots Busy|DRAM Throughput|L2 Cache Throughput|highest-utilized|Achieved Occupancy|No kernels" $OUT/cudnn-ncu-rows.log | cut -c1-200 | head -80
