// C = silu(A·B1ᵀ · sA·sB1) * (A·B2ᵀ · sA·sB2): both FP8 (e4m3) GEMMs and the SiLU-multiply
// in one kernel for Hopper (sm_90a). A is M x K, B1 and B2 are N x K, all K-major; the
// scales are per-tensor float32 in device memory; C is M x N fp16, written once.
//
// One producer warp issues TMA copies of an A tile and the two B tiles into a ring of
// STAGES shared-memory stages; full[s] counts their bytes in, empty[s] counts the
// consumer warpgroups out. CONSUMERS warpgroups each own 64 rows of the BM = 64 *
// CONSUMERS row tile and run FP8 wgmma for both products from the same A tile, so A is
// read once for both. Hopper's FP8 tensor cores accumulate with fewer bits than fp32:
// with PROMOTE > 0 each product accumulates in wgmma registers for PROMOTE k-tiles of
// 128, then is added into fp32 registers (the accuracy of long K); PROMOTE = 0 keeps
// one accumulator per product. Within a window, a k-tile's wgmma batch runs while the
// next one is issued. The epilogue scales, applies SiLU and the product in
// fp32 and stores fp16, rows and columns past M and N masked (TMA reads them as 0).
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

// With one consumer warpgroup, two blocks share an SM (their k-loops drift apart, so one
// block's wgmma runs while the other drains and promotes): 128 registers per thread at
// entry, then 40 for the producer and 216 for the consumer, two blocks in 64 K.
template <int BM, int BN, int STAGES, int CONSUMERS, int PROMOTE, int STAGGER, int SERIAL>
__global__ void __launch_bounds__(128 * (CONSUMERS + 1), CONSUMERS == 1 ? 2 : 1)
    dual_gemm_silu(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b1,
                   const __grid_constant__ CUtensorMap tma_b2, const float *scale_a, const float *scale_b1,
                   const float *scale_b2, __half *c, int m, int n, int k) {
  using T = float_e4m3_t;
  constexpr int BK = 128;  // one 128-byte swizzle row of FP8 per tile row
  static_assert(BM == 64 * CONSUMERS, "each consumer warpgroup owns 64 rows");
  using Barrier = cutlass::arch::ClusterBarrier;
  using TxBarrier = cutlass::arch::ClusterTransactionBarrier;

  extern __shared__ uint8_t dynamic_smem[];
  T *base = reinterpret_cast<T *>((reinterpret_cast<uintptr_t>(dynamic_smem) + 1023) & ~uintptr_t(1023));
  T *a_smem = base;
  T *b1_smem = a_smem + BM * BK * STAGES;
  T *b2_smem = b1_smem + BN * BK * STAGES;
  __shared__ uint64_t full[STAGES], empty[STAGES];

  // Read through a shuffle so the compiler knows it is the same in the whole warp (wgmma
  // under a branch it cannot prove uniform gets serialized).
  const int warpgroup = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int tiles = (k + BK - 1) / BK;
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
      for (int t = 0; t < tiles; ++t) {
        const int s = t % STAGES;
        if (t >= STAGES) Barrier::wait(&empty[s], ((t / STAGES) - 1) & 1);
        TxBarrier::arrive_and_expect_tx(&full[s], stage_bytes);
        SM90_TMA_LOAD_2D::copy(&tma_a, &full[s], 0, a_smem + s * BM * BK, t * BK, m0);
        SM90_TMA_LOAD_2D::copy(&tma_b1, &full[s], 0, b1_smem + s * BN * BK, t * BK, n0);
        SM90_TMA_LOAD_2D::copy(&tma_b2, &full[s], 0, b2_smem + s * BN * BK, t * BK, n0);
      }
    }
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<CONSUMERS == 1 ? 216 : 240>();

  // This consumer's 64 rows of the A ring; both B rings whole.
  const int row0 = (warpgroup - 1) * 64;
  // Stage s of the A ring starts at s * BM * BK, this consumer's rows at row0 * BK
  // (whole 8-row swizzle atoms, so the layout is the same).
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
  Tensor gC = make_tensor(make_gmem_ptr(c), make_shape(m, n), make_stride(n, Int<1>{}));
  Tensor gTile = local_tile(gC, make_shape(Int<64>{}, Int<BN>{}), make_coord(blockIdx.y * CONSUMERS + warpgroup - 1, blockIdx.x));
  Tensor acc1 = thr.partition_fragment_C(gTile);
  Tensor acc2 = thr.partition_fragment_C(gTile);
  clear(acc1);
  clear(acc2);
  // With promotion, wgmma accumulates into these for PROMOTE k-tiles at a time.
  Tensor part1 = thr.partition_fragment_C(gTile);
  Tensor part2 = thr.partition_fragment_C(gTile);
  clear(part1);
  clear(part2);

  auto release = [&](int stage) {
    if (threadIdx.x % 128 == 0) Barrier::arrive(&empty[stage]);
  };
  if constexpr (SERIAL) {
    // The two products one after the other through one set of partial sums: per k-tile,
    // product 1's batch, drain, add into acc1, then product 2's, drain, add into acc2.
    // Three accumulators instead of four make BN = 128 fit; with STAGGER the second
    // consumer runs the products in the other order, so the two drain in turn.
    static_assert(PROMOTE == 1, "serial products promote once per k-tile");
    auto mainloop = [&](auto first_c) {
      constexpr int first = decltype(first_c)::value;
      for (int t = 0; t < tiles; ++t) {
        const int s = t % STAGES;
        Tensor tCrA = thr.make_fragment_A(thr.partition_A(a_stage(s)));
        Tensor tCrB1 = thr.make_fragment_B(thr.partition_B(b_stage(b1_smem, s)));
        Tensor tCrB2 = thr.make_fragment_B(thr.partition_B(b_stage(b2_smem, s)));
        Barrier::wait(&full[s], (t / STAGES) & 1);
        CUTE_UNROLL
        for (int product = 0; product < 2; ++product) {
          const bool second = (product ^ first) == 1;
          warpgroup_fence_operand(part1);
          warpgroup_arrive();
          CUTE_UNROLL
          for (int kb = 0; kb < size<2>(tCrA); ++kb) {
            mma.accumulate_ = kb == 0 ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
            gemm(mma, tCrA(_, _, kb), second ? tCrB2(_, _, kb) : tCrB1(_, _, kb), part1);
          }
          warpgroup_commit_batch();
          warpgroup_wait<0>();
          warpgroup_fence_operand(part1);
          auto &acc = second ? acc2 : acc1;
          CUTE_UNROLL
          for (int i = 0; i < size(acc1); ++i) acc(i) += part1(i);
        }
        release(s);
      }
    };
    if (warpgroup == 1 || !STAGGER)
      mainloop(Int<0>{});
    else
      mainloop(Int<1>{});
  } else if constexpr (STAGGER) {
    // Staggered windows: every consumer promotes after 4 k-steps of 32 (one k-tile's
    // worth, the same accuracy), but the second consumer's windows start half a k-tile
    // later, so while one warpgroup drains its wgmma and adds its partial sums, the
    // other has a batch queued on the tensor cores. A window that ends at step `offset`
    // of k-tile t has finished every step of k-tile t - 1, whose stage goes back then.
    static_assert(PROMOTE == 1, "staggered windows promote once per k-tile");
    constexpr int STEPS = BK / 32;
    // The offset is a compile-time constant in each warpgroup's copy of the loop, so
    // every wgmma sits in straight-line code (ptxas serializes wgmma it cannot place).
    auto mainloop = [&](auto offset_c) {
    constexpr int offset = decltype(offset_c)::value;
    bool fresh = true;
    for (int t = 0; t < tiles; ++t) {
      const int s = t % STAGES;
      Tensor tCrA = thr.make_fragment_A(thr.partition_A(a_stage(s)));
      Tensor tCrB1 = thr.make_fragment_B(thr.partition_B(b_stage(b1_smem, s)));
      Tensor tCrB2 = thr.make_fragment_B(thr.partition_B(b_stage(b2_smem, s)));
      CUTE_UNROLL
      for (int kb = 0; kb < STEPS; ++kb) {
        if (kb == offset && (t > 0 || offset > 0)) {
          warpgroup_commit_batch();
          warpgroup_wait<0>();
          warpgroup_fence_operand(part1);
          warpgroup_fence_operand(part2);
          CUTE_UNROLL
          for (int i = 0; i < size(acc1); ++i) {
            acc1(i) += part1(i);
            acc2(i) += part2(i);
          }
          if (t > 0) release((t - 1) % STAGES);
          fresh = true;
        }
        if (kb == 0) Barrier::wait(&full[s], (t / STAGES) & 1);
        if (kb == 0 || kb == offset) {
          warpgroup_fence_operand(part1);
          warpgroup_fence_operand(part2);
          warpgroup_arrive();
        }
        mma.accumulate_ = fresh ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
        gemm(mma, tCrA(_, _, kb), tCrB1(_, _, kb), part1);
        mma.accumulate_ = fresh ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
        gemm(mma, tCrA(_, _, kb), tCrB2(_, _, kb), part2);
        fresh = false;
      }
    }
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(part1);
    warpgroup_fence_operand(part2);
    CUTE_UNROLL
    for (int i = 0; i < size(acc1); ++i) {
      acc1(i) += part1(i);
      acc2(i) += part2(i);
    }
    };
    if (warpgroup == 1)
      mainloop(Int<0>{});
    else
      mainloop(Int<STEPS / 2>{});
  } else {
    // One batch of wgmma per k-tile. A batch may still run while the next is issued
    // (they chain on the same registers); the stage it read is handed back once it is
    // done. At the end of a promotion window every batch must be done before the
    // window's sums are added into fp32 and the next window starts from zero.
    int pending = -1;  // the stage of the previous k-tile, not yet handed back
    for (int t = 0; t < tiles; ++t) {
      const int s = t % STAGES;
      Barrier::wait(&full[s], (t / STAGES) & 1);
      Tensor tCrA = thr.make_fragment_A(thr.partition_A(a_stage(s)));
      Tensor tCrB1 = thr.make_fragment_B(thr.partition_B(b_stage(b1_smem, s)));
      Tensor tCrB2 = thr.make_fragment_B(thr.partition_B(b_stage(b2_smem, s)));
      const bool fresh = PROMOTE > 0 && t % (PROMOTE > 0 ? PROMOTE : 1) == 0;
      auto &d1 = PROMOTE > 0 ? part1 : acc1;
      auto &d2 = PROMOTE > 0 ? part2 : acc2;
      warpgroup_fence_operand(d1);
      warpgroup_fence_operand(d2);
      warpgroup_arrive();
      CUTE_UNROLL
      for (int kb = 0; kb < size<2>(tCrA); ++kb) {
        mma.accumulate_ = (fresh && kb == 0) ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
        gemm(mma, tCrA(_, _, kb), tCrB1(_, _, kb), d1);
        mma.accumulate_ = (fresh && kb == 0) ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
        gemm(mma, tCrA(_, _, kb), tCrB2(_, _, kb), d2);
      }
      warpgroup_commit_batch();
      const bool window_end = PROMOTE > 0 && ((t + 1) % (PROMOTE > 0 ? PROMOTE : 1) == 0 || t + 1 == tiles);
      if (window_end) {
        warpgroup_wait<0>();
        warpgroup_fence_operand(d1);
        warpgroup_fence_operand(d2);
        if (pending >= 0) release(pending);
        release(s);
        pending = -1;
        if constexpr (PROMOTE > 0) {
          CUTE_UNROLL
          for (int i = 0; i < size(acc1); ++i) {
            acc1(i) += part1(i);
            acc2(i) += part2(i);
          }
        }
      } else {
        warpgroup_wait<1>();  // the previous k-tile's batch is done
        warpgroup_fence_operand(d1);
        warpgroup_fence_operand(d2);
        if (pending >= 0) release(pending);
        pending = s;
      }
    }
  }
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc1);
  warpgroup_fence_operand(acc2);

  const float s1 = scale_a[0] * scale_b1[0], s2 = scale_a[0] * scale_b2[0];
  Tensor tCgC = thr.partition_C(gTile);
  Tensor coords = thr.partition_C(make_identity_tensor(make_shape(Int<64>{}, Int<BN>{})));
  const int r0 = m0 + row0;
  CUTE_UNROLL
  for (int i = 0; i < size(acc1); ++i) {
    if (r0 + get<0>(coords(i)) < m && n0 + get<1>(coords(i)) < n) {
      const float x = acc1(i) * s1, y = acc2(i) * s2;
      tCgC(i) = __float2half_rn(x / (1.0f + __expf(-x)) * y);
    }
  }
}
