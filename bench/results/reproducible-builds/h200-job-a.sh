#!/bin/bash
# GPU machine, after a lock rebuilt from scratch with reproducible compiles: the GPU
# tests, then the FlashAttention family's check (kart.attest) and tuning (kart.tune).
hdr() { echo "== commit $(cat .gpu/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; }
export PATH="$PWD/.gpu/bin:$PATH"
hdr > $OUT/doctor.log; kart doctor >> $OUT/doctor.log 2>&1; tail -4 $OUT/doctor.log
hdr > $OUT/gpu-tests.log; timeout 240 bash .gpu/run >> $OUT/gpu-tests.log 2>&1; tail -3 $OUT/gpu-tests.log
hdr > $OUT/fa-check.log; timeout 200 flash_attn check >> $OUT/fa-check.log 2>&1; tail -1 $OUT/fa-check.log
hdr > $OUT/fa-tune.log; timeout 200 flash_attn tune >> $OUT/fa-tune.log 2>&1; tail -1 $OUT/fa-tune.log
cp kart.tune kart.attest $OUT/
