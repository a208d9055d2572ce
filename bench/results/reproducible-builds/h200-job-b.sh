#!/bin/bash
# GPU machine, second call: the CuTe GEMM and the FP8 dual GEMM + SiLU, each checked
# (kart.attest) and tuned (kart.tune), then each family's demo through best().
hdr() { echo "== commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; }
export PATH="$PWD/.gpu/bin:$PATH"
for k in dual_gemm_silu cute_gemm; do
  for step in check tune demo; do
    hdr > $OUT/$k-$step.log; timeout 150 $k $step >> $OUT/$k-$step.log 2>&1; tail -1 $OUT/$k-$step.log
  done
done
hdr > $OUT/fa-demo.log; timeout 60 flash_attn demo >> $OUT/fa-demo.log 2>&1; tail -1 $OUT/fa-demo.log
cp kart.tune kart.attest $OUT/
