// kernels/dual_gemm_silu's kernel, its source included unchanged, with the output tiles
// taken in another order. The launch is the same (grid: N tiles by M tiles); blocks start
// in launch order, x fastest, so the base kernel's first wave covers whole rows of
// tiles: about 132 / (N / BN) rows of A and every tile of B1 and B2, and each later wave
// reads all of B again from memory (at N = 4096, K = 7168 the two B matrices are 58 MB,
// more than the L2). Here the blocks of a wave take GROUP_M rows of tiles, M fastest
// within the group: at M = 1024 (8 rows of 128) with GROUP_M = 8, a wave covers every
// row of A and 132 / 8 columns of B, so B is read from memory once over the two waves.
#include <cuda.h>
#include <cuda_fp16.h>

// Every header the base includes, first: the macro below is for the base kernel's own
// code only, not for these headers' (their include guards keep them out when the base
// names them again).
#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#ifndef GROUP_M
#error "GROUP_M, rows of output tiles per group, is a param of kernel.toml"
#endif

// The tile (x: column of tiles, y: row of tiles) the block with this launch index
// computes: launch indices run over groups of GROUP_M rows, each group column by column,
// and down its rows within a column (the last group may have fewer rows).
__device__ __forceinline__ uint3 grouped_tile() {
  const unsigned columns = gridDim.x, rows = gridDim.y;
  const unsigned index = blockIdx.y * columns + blockIdx.x;
  const unsigned per_group = GROUP_M * columns;
  const unsigned first_row = index / per_group * GROUP_M;
  const unsigned group_rows = min(rows - first_row, unsigned(GROUP_M));
  const unsigned within = index % per_group;
  return make_uint3(within / group_rows, first_row + within % group_rows, blockIdx.z);
}

#define blockIdx grouped_tile()
#include "dual_gemm_silu.cu"
#undef blockIdx
