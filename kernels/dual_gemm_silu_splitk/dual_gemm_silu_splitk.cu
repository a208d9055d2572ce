// Split-K for the FP8 dual GEMM + SiLU (sm_90a), for few output tiles over a long K
// (M <= 256, K >= 4096: 128 x 2048 makes 32-64 tiles for 132 SMs): the same call as
// kernels/dual_gemm_silu (C = silu(A·B1ᵀ·sA·sB1) * (A·B2ᵀ·sA·sB2), A M x K, B1 and B2
// N x K, e4m3 and K-major, per-tensor float32 scales in device memory, C M x N fp16).
//
// SPLIT blocks per output tile form one thread-block cluster (1, 1, SPLIT), fixed at
// compile time with __cluster_dims__, so a plain launch of grid (N / BN, M / BM, SPLIT)
// makes them and the caller passes nothing more. Block r of a cluster runs k-tiles
// [r·T/SPLIT, (r+1)·T/SPLIT) of the T = K / 128 with the main loop of kernels/
// dual_gemm_silu at PROMOTE = 1 (each product accumulated in wgmma registers for one
// k-tile, then added into fp32: the accuracy contract of its RESULTS.md), and leaves the
// fp32 sums of both products in its own shared memory, in the ring its stages no longer
// use. After a cluster barrier, block r reduces rows r, r + SPLIT, ... of the tile: it
// reads the SPLIT partial sums of each element through distributed shared memory, adds
// them in rank order 0, 1, ..., SPLIT - 1 (a fixed order: the output is the same bits on
// every run, whatever order the blocks finish in), applies the scales, SiLU and the
// product, and stores fp16. A second cluster barrier keeps every block's shared memory
// alive until its peers have read it. No global workspace, no counters: nothing to
// allocate, reset or keep between launches, so it is safe in CUDA graphs as it stands.
//
// The producer and the main loop are copied from kernels/dual_gemm_silu/
// dual_gemm_silu.cu rather than shared through a header: moving them into one would
// change that file's bytes and so the keys of its locked, tuned and attested configs.
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_fp16.h>

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

using namespace cute;

// With one consumer warpgroup, two blocks share an SM where their shared memory fits:
// 128 registers per thread at entry, then 40 for the producer and 216 for the consumer.
template <int BM, int BN, int STAGES, int CONSUMERS, int SPLIT>
__global__ void __cluster_dims__(1, 1, SPLIT) __launch_bounds__(128 * (CONSUMERS + 1), CONSUMERS == 1 ? 2 : 1)
    dual_gemm_silu(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b1,
                   const __grid_constant__ CUtensorMap tma_b2, const float *scale_a, const float *scale_b1,
                   const float *scale_b2, __half *c, int m, int n, int k) {
  using T = float_e4m3_t;
  constexpr int BK = 128;  // one 128-byte swizzle row of FP8 per tile row
  static_assert(BM == 64 * CONSUMERS, "each consumer warpgroup owns 64 rows");
  static_assert(BN % 16 == 0, "the reduction reads rows of partial sums in fours");
  // The partial sums of both products, rows padded by 4 floats so that the fragment
  // stores of consecutive rows fall in different banks; they reuse the ring.
  constexpr int LD = BN + 4;
  static_assert(2 * BM * LD * 4 <= STAGES * (BM + 2 * BN) * BK, "the partial sums fit in the ring");
  using Barrier = cutlass::arch::ClusterBarrier;
  using TxBarrier = cutlass::arch::ClusterTransactionBarrier;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();

  extern __shared__ uint8_t dynamic_smem[];
  T *base = reinterpret_cast<T *>((reinterpret_cast<uintptr_t>(dynamic_smem) + 1023) & ~uintptr_t(1023));
  T *a_smem = base;
  T *b1_smem = a_smem + BM * BK * STAGES;
  T *b2_smem = b1_smem + BN * BK * STAGES;
  float *partial = reinterpret_cast<float *>(base);  // [2][BM][LD], after the main loop
  __shared__ uint64_t full[STAGES], empty[STAGES];

  // Read through a shuffle so the compiler knows it is the same in the whole warp (wgmma
  // under a branch it cannot prove uniform gets serialized).
  const int warpgroup = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int rank = static_cast<int>(cluster.block_rank());
  const int tiles = (k + BK - 1) / BK;
  const int t_begin = tiles * rank / SPLIT, count = tiles * (rank + 1) / SPLIT - t_begin;
  constexpr uint32_t stage_bytes = (BM + 2 * BN) * BK;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      TxBarrier::init(&full[s], 1);
      Barrier::init(&empty[s], CONSUMERS);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    // The producer: one thread, a few registers.
    cutlass::arch::warpgroup_reg_dealloc<CONSUMERS == 1 ? 40 : 24>();
    if (threadIdx.x == 0) {
      for (int i = 0; i < count; ++i) {
        const int s = i % STAGES, kx = (t_begin + i) * BK;
        if (i >= STAGES) Barrier::wait(&empty[s], ((i / STAGES) - 1) & 1);
        TxBarrier::arrive_and_expect_tx(&full[s], stage_bytes);
        SM90_TMA_LOAD_2D::copy(&tma_a, &full[s], 0, a_smem + s * BM * BK, kx, m0);
        SM90_TMA_LOAD_2D::copy(&tma_b1, &full[s], 0, b1_smem + s * BN * BK, kx, n0);
        SM90_TMA_LOAD_2D::copy(&tma_b2, &full[s], 0, b2_smem + s * BN * BK, kx, n0);
      }
    }
    // The consumers' two cluster barriers (below), here in the producer's own code: a
    // path both branches share would be compiled for the producer's 24 or 40 registers.
    cluster.sync();
    cluster.sync();
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<CONSUMERS == 1 ? 216 : 240>();

  // This consumer's 64 rows of the A ring; both B rings whole.
  const int row0 = (warpgroup - 1) * 64;
  auto a_stage = [&](int s) {
    return make_tensor(make_smem_ptr(a_smem + s * BM * BK + row0 * BK),
                       tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, make_shape(Int<64>{}, Int<BK>{})));
  };
  auto b_stage = [&](T *ring, int s) {
    return make_tensor(make_smem_ptr(ring + s * BN * BK),
                       tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, make_shape(Int<BN>{}, Int<BK>{})));
  };

  using Op = decltype(GMMA::ss_op_selector<T, T, float, Shape<Int<64>, Int<BN>, Int<BK>>>());
  TiledMMA mma = make_tiled_mma(Op{});
  auto thr = mma.get_thread_slice(threadIdx.x % 128);
  // The layout of a 64 x BN tile, for the fragments' shapes and coordinates.
  Tensor shape_tile = make_identity_tensor(make_shape(Int<64>{}, Int<BN>{}));
  Tensor acc1 = thr.partition_fragment_C(shape_tile);
  Tensor acc2 = thr.partition_fragment_C(shape_tile);
  Tensor part1 = thr.partition_fragment_C(shape_tile);
  Tensor part2 = thr.partition_fragment_C(shape_tile);
  clear(acc1);
  clear(acc2);

  // Per k-tile: one batch of wgmma for both products into fresh partial sums, drained
  // and added into fp32 (promotion every k-tile), the stage handed back.
  for (int i = 0; i < count; ++i) {
    const int s = i % STAGES;
    Barrier::wait(&full[s], (i / STAGES) & 1);
    Tensor tCrA = thr.make_fragment_A(thr.partition_A(a_stage(s)));
    Tensor tCrB1 = thr.make_fragment_B(thr.partition_B(b_stage(b1_smem, s)));
    Tensor tCrB2 = thr.make_fragment_B(thr.partition_B(b_stage(b2_smem, s)));
    warpgroup_fence_operand(part1);
    warpgroup_fence_operand(part2);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tCrA); ++kb) {
      mma.accumulate_ = kb == 0 ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
      gemm(mma, tCrA(_, _, kb), tCrB1(_, _, kb), part1);
      mma.accumulate_ = kb == 0 ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
      gemm(mma, tCrA(_, _, kb), tCrB2(_, _, kb), part2);
    }
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(part1);
    warpgroup_fence_operand(part2);
    if (threadIdx.x % 128 == 0) Barrier::arrive(&empty[s]);
    CUTE_UNROLL
    for (int j = 0; j < size(acc1); ++j) {
      acc1(j) += part1(j);
      acc2(j) += part2(j);
    }
  }
  warpgroup_fence_operand(acc1);
  warpgroup_fence_operand(acc2);

  // Every consumer's wgmma has read its last stage before any partial sum overwrites
  // the ring (named barrier 1 over the consumer warpgroups; 0 is __syncthreads').
  asm volatile("bar.sync 1, %0;" ::"r"(128 * CONSUMERS) : "memory");
  Tensor coords = thr.partition_C(shape_tile);
  CUTE_UNROLL
  for (int j = 0; j < size(acc1); ++j) {
    const int r = row0 + get<0>(coords(j)), col = get<1>(coords(j));
    partial[r * LD + col] = acc1(j);
    partial[(BM + r) * LD + col] = acc2(j);
  }
  // The partial sums of every block of the cluster are written and visible to all.
  cluster.sync();

  // Rows rank, rank + SPLIT, ... of the tile, four columns per thread and step.
  const float s1 = scale_a[0] * scale_b1[0], s2 = scale_a[0] * scale_b2[0];
  const float *peers[SPLIT];
  CUTE_UNROLL
  for (int q = 0; q < SPLIT; ++q) peers[q] = cluster.map_shared_rank(partial, q);
  constexpr int QUADS = BN / 4;
  const int rows = (BM - rank + SPLIT - 1) / SPLIT;
  const bool vector_store = (n & 3) == 0 && (reinterpret_cast<uintptr_t>(c) & 7) == 0;
  for (int w = static_cast<int>(threadIdx.x) - 128; w < rows * QUADS; w += 128 * CONSUMERS) {
    const int r = rank + (w / QUADS) * SPLIT, col = (w % QUADS) * 4;
    const int gr = m0 + r, gc = n0 + col;
    if (gr >= m || gc >= n) continue;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f), y = x;
    CUTE_UNROLL
    for (int q = 0; q < SPLIT; ++q) {
      const float4 u = *reinterpret_cast<const float4 *>(peers[q] + r * LD + col);
      const float4 v = *reinterpret_cast<const float4 *>(peers[q] + (BM + r) * LD + col);
      x.x += u.x, x.y += u.y, x.z += u.z, x.w += u.w;
      y.x += v.x, y.y += v.y, y.z += v.z, y.w += v.w;
    }
    const float x1[4] = {x.x * s1, x.y * s1, x.z * s1, x.w * s1};
    const float x2[4] = {y.x * s2, y.y * s2, y.z * s2, y.w * s2};
    float out[4];
    CUTE_UNROLL
    for (int e = 0; e < 4; ++e) out[e] = x1[e] / (1.0f + __expf(-x1[e])) * x2[e];
    __half *dst = c + static_cast<size_t>(gr) * n + gc;
    if (vector_store && gc + 3 < n) {
      // 8 bytes at once: C's base is 8-byte aligned, n and gc are multiples of 4.
      const __half2 lo = __floats2half2_rn(out[0], out[1]), hi = __floats2half2_rn(out[2], out[3]);
      uint2 bits;
      bits.x = *reinterpret_cast<const uint32_t *>(&lo);
      bits.y = *reinterpret_cast<const uint32_t *>(&hi);
      *reinterpret_cast<uint2 *>(dst) = bits;
    } else {
      for (int e = 0; e < 4 && gc + e < n; ++e) dst[e] = __float2half_rn(out[e]);
    }
  }
  // No block leaves while a peer may still read its shared memory.
  cluster.sync();
}
