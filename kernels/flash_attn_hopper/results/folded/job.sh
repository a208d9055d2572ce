#!/bin/bash
# The committed kernel: GPU tests, check and tune from Rust (kart.attest, kart.tune), demo, benchmark.
hdr() { echo "== commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; }
hdr > $OUT/gpu-tests.log; timeout 240 bash .gpu/run >> $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log
hdr > $OUT/fa-check.log; .gpu/bin/flash_attn check >> $OUT/fa-check.log 2>&1; tail -2 $OUT/fa-check.log
hdr > $OUT/fa-tune.log; .gpu/bin/flash_attn tune >> $OUT/fa-tune.log 2>&1; tail -2 $OUT/fa-tune.log
hdr > $OUT/fa-demo.log; .gpu/bin/flash_attn demo >> $OUT/fa-demo.log 2>&1; tail -2 $OUT/fa-demo.log
cp kart.tune kart.attest $OUT/
hdr > $OUT/fa-bench.log; echo "command: python3 kernels/flash_attn_hopper/bench.py bench .gpu/fa.py --runs 30" >> $OUT/fa-bench.log
.gpu/bin/kart export --python -o .gpu/fa.py flash_attn --all-configs --target sm_90 --target sm_90a >> $OUT/fa-bench.log 2>&1
python3 kernels/flash_attn_hopper/bench.py bench .gpu/fa.py --runs 30 >> $OUT/fa-bench.log 2>&1; tail -3 $OUT/fa-bench.log
