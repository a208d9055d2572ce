// A Hopper GEMM written on CuTe: C (fp32, M x N, row-major) = A (fp16, M x K) * B^T
// (B fp16, N x K), both K-major. TMA brings BM x BK and BN x BK tiles into a ring of
// STAGES shared-memory buffers (128-byte swizzle, the layout wgmma reads), one
// mbarrier per stage counts the bytes in; one warpgroup multiplies with wgmma straight
// from shared memory and writes its fp32 accumulators out. The host passes two TMA
// descriptors that kart makes (cuTensorMapEncodeTiled), with no C++ host code.
//
// Tiles past M, N or K read as zeros (TMA fills them), so any M and N work and K needs
// only the 16-byte row alignment TMA requires (K a multiple of 8).
#include <cuda.h>

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

using namespace cute;

template <int BM, int BN, int BK, int STAGES>
__global__ void __launch_bounds__(128, 1)
    cute_gemm(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b, float *c,
              int m, int n, int k) {
  using T = half_t;
  static_assert(BK * sizeof(T) == 128, "one 128-byte swizzle row per tile row");
  static_assert(BM % 64 == 0, "wgmma's M is 64 per instruction");

  // The ring: STAGES tiles of A and of B, K-major with the 128-byte swizzle that TMA
  // writes and wgmma reads. The swizzle repeats every 1024 bytes: align the base to it.
  extern __shared__ uint8_t dynamic_smem[];
  T *base = reinterpret_cast<T *>((reinterpret_cast<uintptr_t>(dynamic_smem) + 1023) & ~uintptr_t(1023));
  auto a_layout = tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, make_shape(Int<BM>{}, Int<BK>{}, Int<STAGES>{}));
  auto b_layout = tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, make_shape(Int<BN>{}, Int<BK>{}, Int<STAGES>{}));
  T *a_smem = base;
  T *b_smem = base + BM * BK * STAGES;
  Tensor sA = make_tensor(make_smem_ptr(a_smem), a_layout);
  Tensor sB = make_tensor(make_smem_ptr(b_smem), b_layout);
  __shared__ uint64_t full[STAGES];

  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int tiles = (k + BK - 1) / BK;
  constexpr uint32_t stage_bytes = (BM + BN) * BK * sizeof(T);

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) initialize_barrier(full[s], 1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  // One thread issues every copy: the stage's barrier expects its bytes, then both
  // tiles are requested at (k, row) coordinates, innermost first.
  auto issue = [&](int tile, int s) {
    set_barrier_transaction_bytes(full[s], stage_bytes);
    SM90_TMA_LOAD_2D::copy(&tma_a, &full[s], 0, a_smem + s * BM * BK, tile * BK, m0);
    SM90_TMA_LOAD_2D::copy(&tma_b, &full[s], 0, b_smem + s * BN * BK, tile * BK, n0);
  };
  if (tid == 0) {
    for (int s = 0; s < STAGES && s < tiles; ++s) issue(s, s);
  }

  using Op = decltype(GMMA::ss_op_selector<T, T, float, Shape<Int<64>, Int<BN>, Int<BK>>>());
  TiledMMA mma = make_tiled_mma(Op{});
  auto thr = mma.get_thread_slice(tid);
  Tensor tCsA = thr.partition_A(sA);
  Tensor tCsB = thr.partition_B(sB);
  Tensor tCrA = thr.make_fragment_A(tCsA);  // shared-memory descriptors, per stage
  Tensor tCrB = thr.make_fragment_B(tCsB);

  Tensor gC = make_tensor(make_gmem_ptr(c), make_shape(m, n), make_stride(n, Int<1>{}));
  Tensor gTile = local_tile(gC, make_shape(Int<BM>{}, Int<BN>{}), make_coord(blockIdx.y, blockIdx.x));
  Tensor tCgC = thr.partition_C(gTile);
  Tensor acc = thr.partition_fragment_C(gTile);
  clear(acc);

  for (int t = 0; t < tiles; ++t) {
    const int s = t % STAGES;
    wait_barrier(full[s], (t / STAGES) & 1);
    warpgroup_fence_operand(acc);
    warpgroup_arrive();
    gemm(mma, tCrA(_, _, _, s), tCrB(_, _, _, s), acc);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc);
    // Every warp is done reading stage s before it is refilled.
    __syncthreads();
    if (tid == 0 && t + STAGES < tiles) issue(t + STAGES, s);
  }

  // The accumulators hold this thread's elements of the BM x BN tile; store those
  // inside the matrix.
  Tensor coords = thr.partition_C(make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{})));
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) {
    if (m0 + get<0>(coords(i)) < m && n0 + get<1>(coords(i)) < n) tCgC(i) = acc(i);
  }
}

// The cluster check of the TMA path: each block writes its rank in its cluster and the
// cluster's size (rank + 256 * size), so a launch shows the clusters it really got.
extern "C" __global__ void cluster_ranks(int *out) {
  unsigned rank, size;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
  if (threadIdx.x == 0) out[blockIdx.y * gridDim.x + blockIdx.x] = int(rank + 256 * size);
}
