#!/bin/bash
# GPU machine, third call, with the kart.tune of the re-run tuning: the dual GEMM's demo
# through best(), its benchmark against two _scaled_mm in a CUDA graph, and the
# FlashAttention benchmark against PyTorch's backends.
hdr() { echo "== commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; }
export PATH="$PWD/.gpu/bin:$PATH"
hdr > $OUT/dual-demo.log; timeout 60 dual_gemm_silu demo >> $OUT/dual-demo.log 2>&1; tail -1 $OUT/dual-demo.log
hdr > $OUT/dual-bench.log; echo "command: python3 kernels/dual_gemm_silu/bench.py .gpu/dual_gemm_kernels.py" >> $OUT/dual-bench.log
kart export --python -o .gpu/dual_gemm_kernels.py dual_gemm_silu --all-configs >> $OUT/dual-bench.log 2>&1
timeout 150 python3 kernels/dual_gemm_silu/bench.py .gpu/dual_gemm_kernels.py >> $OUT/dual-bench.log 2>&1; tail -3 $OUT/dual-bench.log
hdr > $OUT/fa-bench.log; echo "command: python3 kernels/flash_attn_hopper/bench.py bench .gpu/fa.py --runs 30" >> $OUT/fa-bench.log
kart export --python -o .gpu/fa.py flash_attn --all-configs --target sm_90 --target sm_90a >> $OUT/fa-bench.log 2>&1
timeout 300 python3 kernels/flash_attn_hopper/bench.py bench .gpu/fa.py --runs 30 >> $OUT/fa-bench.log 2>&1; tail -3 $OUT/fa-bench.log
