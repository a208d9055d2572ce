#!/bin/bash
# Where nvcc's module id comes from: a three-line template unit over libcu++ compiled
# with the pinned nvcc (NVCC), keeping the intermediate files to read the id cicc wrote.
# Run from an empty folder: module-id.sh > module-id.log
set -u
NVCC=${NVCC:?set NVCC to the pinned nvcc}
mkdir -p a c keep
cat > a/k.cu <<'CU'
#include <cuda/std/utility>
template <int BM> __global__ void k(int* x) { auto p = cuda::std::make_pair(BM, 1); x[threadIdx.x] = p.first + p.second; }
static void* const inst = reinterpret_cast<void*>(&k<64>);
CU
cp a/k.cu c/k.cu
id() { cat keep/k.module_id; echo "   cubin $(sha256sum "$1" | cut -c1-16)"; }
run() { local out=$1; shift; "$NVCC" -cubin -arch=sm_90 --keep --keep-dir keep -o "$out" "$@" 2>/dev/null; id "$out"; }
echo "# the same file, same path, three runs: the last field is the front end's process id"
for i in 1 2 3; do run a/o$i.cubin a/k.cu; done
echo "# -frandom-seed=1234: the last field is the seed (0x4d2), the first a hash of the absolute path"
run a/s.cubin -frandom-seed=1234 a/k.cu
run c/s.cubin -frandom-seed=1234 c/k.cu
echo "# and a fixed --orig_src_path_name (cicc takes the last one given): one id, one cubin"
run a/f.cubin -frandom-seed=1234 -Xcicc --orig_src_path_name -Xcicc k.cu a/k.cu
run c/f.cubin -frandom-seed=1234 -Xcicc --orig_src_path_name -Xcicc k.cu c/k.cu
echo "# the internal symbols that carry it"
strings a/o1.cubin | grep -m 3 "_INTERNAL_"
