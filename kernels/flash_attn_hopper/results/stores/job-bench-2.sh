#!/bin/bash
# A second benchmark run of the same commit (run-to-run spread against cuDNN).
{ echo "== commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "command: python3 kernels/flash_attn_hopper/bench.py bench .gpu/fa.py --runs 30"; } > $OUT/fa-bench-2.log
.gpu/bin/kart export --python -o .gpu/fa.py flash_attn --all-configs --target sm_90 --target sm_90a >> $OUT/fa-bench-2.log 2>&1
python3 kernels/flash_attn_hopper/bench.py bench .gpu/fa.py --runs 30 >> $OUT/fa-bench-2.log 2>&1; tail -2 $OUT/fa-bench-2.log
