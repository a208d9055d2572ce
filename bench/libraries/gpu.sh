#!/usr/bin/env bash
# On a GPU machine (H100 or H200), from the repository root: checks the three public
# kernel libraries against PyTorch through the modules bench/libraries/build.sh exported.
# Needs only bench/libraries/out/{sgemm,llmc,deepgemm}.py (each embeds its cubins; a few
# MiB together), this folder's gpu_check.py, python3 with torch and a CUDA 13 driver;
# no kart binary, nvcc or store. Writes the output to $OUT/public-libraries-gpu.log
# when OUT is set. Exit status: gpu_check.py's (1 if any check failed).
set -euo pipefail
cd "$(dirname "$0")/../.."
log=${OUT:-.}/public-libraries-gpu.log
{
  echo "kart: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "command: python3 bench/libraries/gpu_check.py bench/libraries/out"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
} > "$log"
set +e
python3 bench/libraries/gpu_check.py bench/libraries/out 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
exit "$rc"
