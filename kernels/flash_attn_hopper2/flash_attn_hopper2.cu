// FlashAttention forward for Hopper (sm_90a), second version: kernels/flash_attn_hopper's
// kernel with a cheaper softmax and schedules for causal work, each a template
// parameter the tuner chooses (0 = as kernels/flash_attn_hopper does it).
//
// O = softmax(Q K^T / sqrt(D)) V, fp16 Q, K, V, O laid out [batch, heads, seq, D]
// contiguous, fp32 scores, softmax statistics and accumulation; any seq (tails masked);
// CAUSAL = 1 masks keys after the query. The same contract and entry name as
// kernels/flash_attn, of which this kernel is a variant (kernel.toml's variant_of).
//
// The structure is kernels/flash_attn_hopper's (see its source for the details): a
// persistent grid; a producer warp loading Q once per work item and K, V tiles of BN
// rows into a ring of STAGES stages by TMA; CONSUMERS warpgroups of 64 query rows each
// running S = Q K^T by wgmma from shared memory, the online softmax in base 2 on S's
// registers, and O += P V with P from registers; PIPELINE issues S of tile t before
// O += P V of tile t - 1; PINGPONG makes the consumers take turns to issue; WIDE makes
// O += P V one N = D product; TREE splits the row max and sum into four chains. Its
// CARRY (the pipeline across work items) is not here. Masks apply only to the tiles
// that need them: the last tile when seq is not a multiple of BN and, when causal, the
// tiles on the diagonal of the consumer's 64 rows.
//
// New here:
// - LAZY: the rescale of O skipped when it changes nothing. 1: when no row maximum of
//   the warp grew in this tile (a warp vote; the rows whose maximum did not grow have a
//   factor of exactly 1), and on an item's first tile (O is zero). 2: as 1, and a
//   maximum that grew by at most 8 (in base 2) is kept stale, so P's entries stay
//   below 2^8 (exact in fp16's range) and O is rescaled only when some row of the warp
//   grew by more; the sum uses the same stale maximum, so O / l is unchanged.
// (P's conversion to fp16 is already one F2FP.F16.F32.PACK_AB per two scores in the
// SASS of kernels/flash_attn_hopper: nvcc pairs the conversions by itself.)
// - SCHED (causal work, where a query block's tiles grow with its index): the order in
//   which the persistent blocks take work items. 0: a head's query blocks in a row,
//   longest first, the order turned by one per pass of the grid (as before). 1: longest
//   first over groups of heads whose K and V fit in 16 MiB of L2 (every block takes the
//   longest query blocks of the group before any shorter one), the blocks taking the
//   items in a snake (the order reversed on every other pass, so a block that got a
//   longer item on one pass gets a shorter one on the next). 2: each block takes pairs
//   of one head's query blocks, the i-th longest with the i-th shortest, so every pair
//   has the same count of tiles (query_blocks + 1).
// - QREG: Q as wgmma's A operand from registers (D / 4 more per consumer thread). Each
//   consumer reads its rows of Q into registers when its work item starts and hands the
//   buffer back at once, so the next item's Q loads under the whole of this item rather
//   than under its last product and epilogue (a wait of 0.3-0.5 us per item, measured,
//   with the buffer held to the item's last S).
// - CARRY (with QREG; causal rows): one pipeline over every tile of every item a block
//   takes, as in kernels/flash_attn_hopper: S of an item's first tile is issued with
//   O += P V of the previous item's last tile, so an item's first S and last product no
//   longer run alone. (In kernels/flash_attn_hopper it needed a second Q buffer, which at
//   head dim 128 left room for two K/V stages only; with Q in registers it keeps three.)
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

namespace fa_hopper2 {

// Registers after the split: few for the producer, the rest for the consumers (the
// whole file holds 64 K 32-bit registers per SM, one block per SM).
template <int CONSUMERS>
struct Registers;
template <>
struct Registers<1> {  // two blocks per SM
  static constexpr int producer = 40, consumer = 216;
};
template <>
struct Registers<2> {
  static constexpr int producer = 24, consumer = 240;
};
template <>
struct Registers<3> {
  static constexpr int producer = 32, consumer = 160;
};

// The max and the sum over the 4 threads of a quad (they share a row of the accumulator).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// 2^x on the special-function unit, subnormal results flushed to zero. exp2f keeps
// them, at the cost of a compare and two predicated multiplies around every MUFU.EX2
// (four instructions where one does, once per score); P is rounded to fp16 anyway, and
// 2^-inf is still 0. Measured on the H200: 2-6% faster on the large rows.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace fa_hopper2

template <int D, int BN, int CONSUMERS, int STAGES, int CAUSAL, int PIPELINE, int PINGPONG, int WIDE,
          int TREE, int LAZY, int SCHED, int QREG, int CARRY>
__global__ void __launch_bounds__(128 * (CONSUMERS + 1), CONSUMERS == 1 ? 2 : 1)
    kart_flash_attn_fwd(const __grid_constant__ CUtensorMap tma_q, const __grid_constant__ CUtensorMap tma_k,
                        const __grid_constant__ CUtensorMap tma_v, __half *o, int seq, int heads) {
  using T = half_t;
  constexpr int BM = 64 * CONSUMERS;
  constexpr int CHUNKS = D / 64;  // 64-column chunks of a row: one 128-byte swizzle row each
  static_assert(D == 64 || D == 128, "D is 64 or 128");
  static_assert(BN % 16 == 0 && BN <= 256, "BN is a multiple of 16, at most 256");
  using Barrier = cutlass::arch::ClusterBarrier;
  using TxBarrier = cutlass::arch::ClusterTransactionBarrier;

  // Shared memory: Q as CONSUMERS x CHUNKS tiles of 64 x 64, then per stage K and V as
  // CHUNKS tiles of BN x 64 each; every tile in TMA's 128-byte swizzle.
  extern __shared__ uint8_t dynamic_smem[];
  T *base = reinterpret_cast<T *>((reinterpret_cast<uintptr_t>(dynamic_smem) + 1023) & ~uintptr_t(1023));
  T *q_smem = base;
  T *k_smem = q_smem + BM * D;
  T *v_smem = k_smem + STAGES * BN * D;
  __shared__ uint64_t q_full, q_empty, k_full[STAGES], v_full[STAGES], empty[STAGES];

  // Read through a shuffle so the compiler knows it is the same in the whole warp (wgmma
  // under a branch it cannot prove uniform gets serialized).
  const int warpgroup = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
  const int key_tiles = (seq + BN - 1) / BN;
  const int query_blocks = (seq + BM - 1) / BM;
  const int work = query_blocks * heads;
  // SCHED 1: heads per group, as many as have their K and V in 16 MiB (at least one).
  const int group = SCHED == 1 ? int(max(1ll, min((long long)heads, (16ll << 20) / (4ll * max(seq, 1) * D)))) : 1;
  // The n-th work item of this block (n = 0, 1, ...): 1 with its query block's first
  // row m0 and its batch x head bh, 2 for a slot with no item (skip it), 0 past the
  // last. The producer and every consumer walk the same sequence.
  auto slot = [&](int n, int &m0, int &bh) -> int {
    if constexpr (SCHED == 0) {
      // Items in turn over the resident blocks; consecutive items are the query blocks
      // of one head, so the blocks running at once share heads and read each K and V
      // tile from L2 (ordered head-first, every running block streamed its own head:
      // DRAM at 77-85%, measured); within a head the last query blocks (the most keys
      // when causal) come first, the order turned by one per pass of the grid over the
      // heads, so a block does not get a query block of the same length on every pass.
      const int item = blockIdx.x + n * gridDim.x;
      if (item >= work) return 0;
      bh = item / query_blocks;
      const int turn = CAUSAL ? bh * query_blocks / gridDim.x : 0;
      m0 = (query_blocks - 1 - (item + turn) % query_blocks) * BM;
      return 1;
    } else if constexpr (SCHED == 1) {
      // Longest first within each group of heads: item r of a group is query block
      // query_blocks - 1 - r / heads_in_group of the group's head r % heads_in_group.
      // Pass n of the grid takes items n * gridDim.x onwards, on odd passes in reverse
      // block order.
      const int item = n * gridDim.x + ((n & 1) ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
      if (item >= work) return 0;
      const int span = group * query_blocks;
      const int section = item / span;
      const int first_head = section * group;
      const int in_group = min(group, heads - first_head);
      const int r = item - section * span;
      bh = first_head + r % in_group;
      m0 = (query_blocks - 1 - r / in_group) * BM;
      return 1;
    } else {
      // Pairs (i-th longest, i-th shortest) of one head's query blocks, consecutive
      // pairs of a head in turn over the blocks; with an odd count the middle query
      // block is a pair alone.
      const int pairs = (query_blocks + 1) / 2;
      const int unit = blockIdx.x + (n / 2) * gridDim.x;
      if (unit >= pairs * heads) return 0;
      bh = unit / pairs;
      const int i = unit - bh * pairs;
      const int block = (n & 1) ? i : query_blocks - 1 - i;
      if ((n & 1) && block == query_blocks - 1 - i) return 2;
      m0 = block * BM;
      return 1;
    }
  };
  // Causal: the keys up to the block's last query row.
  auto tiles_of = [&](int m0) { return CAUSAL ? min(key_tiles, (m0 + BM + BN - 1) / BN) : key_tiles; };

  if (threadIdx.x == 0) {
    TxBarrier::init(&q_full, 1);
    Barrier::init(&q_empty, QREG ? CONSUMERS * 128 : CONSUMERS);
    for (int s = 0; s < STAGES; ++s) {
      TxBarrier::init(&k_full[s], 1);
      TxBarrier::init(&v_full[s], 1);
      Barrier::init(&empty[s], CONSUMERS);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<fa_hopper2::Registers<CONSUMERS>::producer>();
    if (threadIdx.x == 0) {
      // The ring of K and V stages runs on across work items (`it` counts its uses), so
      // the next item's first tiles load under this item's last math and epilogue.
      int it = 0, local = 0;
      for (int n = 0;; ++n) {
        int m0, bh;
        const int got = slot(n, m0, bh);
        if (got == 0) break;
        if (got == 2) continue;
        if (local > 0) Barrier::wait(&q_empty, (local - 1) & 1);
        TxBarrier::arrive_and_expect_tx(&q_full, BM * D * 2);
        for (int w = 0; w < CONSUMERS; ++w)
          for (int c = 0; c < CHUNKS; ++c)
            SM90_TMA_LOAD_3D::copy(&tma_q, &q_full, 0, q_smem + (w * CHUNKS + c) * 64 * 64, c * 64, m0 + w * 64, bh);
        const int tiles = tiles_of(m0);
        for (int t = 0; t < tiles; ++t, ++it) {
          const int s = it % STAGES;
          if (it >= STAGES) Barrier::wait(&empty[s], ((it / STAGES) - 1) & 1);
          TxBarrier::arrive_and_expect_tx(&k_full[s], BN * D * 2);
          for (int c = 0; c < CHUNKS; ++c)
            SM90_TMA_LOAD_3D::copy(&tma_k, &k_full[s], 0, k_smem + (s * CHUNKS + c) * BN * 64, c * 64, t * BN, bh);
          TxBarrier::arrive_and_expect_tx(&v_full[s], BN * D * 2);
          for (int c = 0; c < CHUNKS; ++c)
            SM90_TMA_LOAD_3D::copy(&tma_v, &v_full[s], 0, v_smem + (s * CHUNKS + c) * BN * 64, c * 64, t * BN, bh);
        }
        ++local;
      }
    }
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<fa_hopper2::Registers<CONSUMERS>::consumer>();

  const int consumer = warpgroup - 1;
  const int tid = threadIdx.x % 128;
  // This thread's rows of the 64-row tile (wgmma's accumulator layout): `row` and row + 8.
  const int row = (tid / 32) * 16 + (tid / 4) % 8;
  // The current work item (set at the top of each).
  int m0 = 0, bh = 0, q_row0 = 0, tiles = 0, ring = 0;  // ring: K/V stages used before this item

  // S = Q K^T: M = 64, N = BN, K = D, both operands K-major in shared memory.
  // QREG: Q as the A operand from registers, read from shared memory once per work item.
  using SOp = std::conditional_t<QREG != 0, decltype(GMMA::rs_op_selector<T, T, float, Shape<_64, Int<BN>, Int<D>>>()),
                                 decltype(GMMA::ss_op_selector<T, T, float, Shape<_64, Int<BN>, Int<D>>>())>;
  TiledMMA s_mma = make_tiled_mma(SOp{});
  auto s_thr = s_mma.get_thread_slice(tid);
  // This consumer's 64 rows of Q in shared memory.
  Tensor sQ = make_tensor(make_smem_ptr(q_smem + consumer * CHUNKS * 64 * 64),
                          tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, make_shape(_64{}, Int<D>{})));
  // QREG: Q's registers (D / 4 per thread), filled by ldmatrix; with QREG 0, the
  // descriptors of Q in shared memory.
  Tensor tSrQ = [&] {
    if constexpr (QREG) return s_thr.partition_fragment_A(sQ);
    else return s_thr.make_fragment_A(s_thr.partition_A(sQ));
  }();
  auto q_copy = make_tiled_copy_A(Copy_Atom<SM75_U32x4_LDSM_N, T>{}, s_mma);
  auto q_thr_copy = q_copy.get_thread_slice(tid);
  // O += P V in PARTS products of N = PV_N columns (all of D with WIDE, else a 64-column
  // chunk each): M = 64, K = BN; P from registers, V MN-major (its rows are K) in
  // shared memory, a part's chunks one after the other.
  constexpr int PV_N = WIDE ? D : 64;
  constexpr int PARTS = D / PV_N;
  using OOp = decltype(GMMA::rs_op_selector<T, T, float, Shape<_64, Int<PV_N>, Int<BN>>, GMMA::Major::K,
                                            GMMA::Major::MN>());
  TiledMMA o_mma = make_tiled_mma(OOp{});
  auto o_thr = o_mma.get_thread_slice(tid);

  Tensor acc_s = s_thr.partition_fragment_C(make_identity_tensor(make_shape(_64{}, Int<BN>{})));
  using OFragment = decltype(o_thr.partition_fragment_C(make_identity_tensor(make_shape(_64{}, Int<PV_N>{}))));
  OFragment acc_o[PARTS];
  // P's registers, shaped as the A operand (only the layout of the tensor passed matters).
  Tensor tOrP = o_thr.partition_fragment_A(make_tensor(make_gmem_ptr(static_cast<T *>(nullptr)),
                                                       make_layout(make_shape(_64{}, Int<BN>{}))));
  static_assert(decltype(size(acc_s))::value == decltype(size(tOrP))::value, "P takes S's registers");

  // Scores in base 2: exp(x / sqrt(D)) = exp2(x * log2(e) / sqrt(D)).
  const float scale = 1.44269504088896340736f * rsqrtf(float(D));
  float row_max[2], row_sum[2];

  // One k-tile's steps, as lambdas over its index in the K/V ring's use (g; the ring's
  // stage is g % STAGES): S = Q K^T issued (not waited for);
  // the softmax of a finished S (masks, running max and sum, P left in S's registers
  // as fp32); O += P V issued; O rescaled and P converted to fp16 once that is done.
  auto issue_s = [&](int g) {
    const int s = g % STAGES;
    Tensor sK = make_tensor(make_smem_ptr(k_smem + s * CHUNKS * BN * 64),
                            tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, make_shape(Int<BN>{}, Int<D>{})));
    Tensor tSrK = s_thr.make_fragment_B(s_thr.partition_B(sK));
    TxBarrier::wait(&k_full[s], (g / STAGES) & 1);
    s_mma.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tSrQ); ++kb) {
      gemm(s_mma, tSrQ(_, _, kb), tSrK(_, _, kb), acc_s);
      s_mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
  };
  auto issue_o = [&](int g) {
    const int s = g % STAGES;
    TxBarrier::wait(&v_full[s], (g / STAGES) & 1);
    CUTE_UNROLL
    for (int p = 0; p < PARTS; ++p) {
      // Swizzle atoms of 64 columns x 8 rows, down a chunk's BN rows first, then to the
      // next chunk (as TMA wrote them).
      Tensor sV = make_tensor(make_smem_ptr(v_smem + (s * CHUNKS + p * (PV_N / 64)) * BN * 64),
                              tile_to_shape(GMMA::Layout_MN_SW128_Atom<T>{}, make_shape(Int<PV_N>{}, Int<BN>{}),
                                            Step<_2, _1>{}));
      Tensor tOrV = o_thr.make_fragment_B(o_thr.partition_B(sV));
      CUTE_UNROLL
      for (int kb = 0; kb < size<2>(tOrP); ++kb) gemm(o_mma, tOrP(_, _, kb), tOrV(_, _, kb), acc_o[p]);
    }
    warpgroup_commit_batch();
  };
  float rescale[2];
  // Whether O needs the rescale of this tile (LAZY: a warp-uniform answer).
  bool rescale_o = true;
  auto softmax = [&](int t) {
    // Mask keys past seq, and (causal) keys after the query, only in tiles that have
    // any: the last tile when seq is not a multiple of BN, and the tiles on the
    // diagonal. A row's keys end at `limit` (this tile's columns counted from k0).
    const int k0 = t * BN;
    if (k0 + BN > seq || (CAUSAL && k0 + BN - 1 > q_row0)) {
      int limit[2];
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int r = q_row0 + row + 8 * h;
        limit[h] = (CAUSAL ? min(seq, r + 1) : seq) - k0 - 2 * (tid % 4);
      }
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i)
        if (8 * (i / 4) + i % 2 >= limit[(i / 2) % 2]) acc_s(i) = -INFINITY;
    }
    // Two rows per thread: value i belongs to row (i / 2) % 2.
    // With TREE, four partial maxima (and sums) per row, combined at the end: chains of
    // 8 dependent FMNMX (FADD) instead of 32. Faster on some causal problems, slower on
    // others; the tuner decides.
    constexpr int LANES = TREE ? 4 : 1;
    float part_max[2][LANES];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h)
      CUTE_UNROLL
      for (int l = 0; l < LANES; ++l) part_max[h][l] = -INFINITY;
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i)
      part_max[(i / 2) % 2][(i / 4) % LANES] = fmaxf(part_max[(i / 2) % 2][(i / 4) % LANES], acc_s(i));
    float tile_max[2];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = part_max[h][0];
      CUTE_UNROLL
      for (int l = 1; l < LANES; ++l) tile_max[h] = fmaxf(tile_max[h], part_max[h][l]);
    }
    float shift[2], new_max[2];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) new_max[h] = fmaxf(row_max[h], fa_hopper2::quad_max(tile_max[h]) * scale);
    if constexpr (LAZY > 0) {
      // Does any row of the warp need a new maximum? LAZY 1: one that grew at all;
      // LAZY 2: one that grew by more than 8 (from -inf counts; -inf to -inf is NaN,
      // which does not). Otherwise every row keeps its maximum (LAZY 2: a stale one,
      // at most 2^8 below the true one) and O and the sums stay as they are.
      bool grow = false;
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) grow |= LAZY == 1 ? new_max[h] != row_max[h] : new_max[h] - row_max[h] > 8.f;
      grow = __any_sync(0xffffffff, grow);
      // On an item's first tile O is zero: nothing to rescale (the sums are zero too).
      // With CARRY, O holds the previous item's output on an item's first tile: the
      // rescale by exp2(-inf) = 0 clears it.
      rescale_o = CARRY ? grow || t == 0 : grow && t > 0;
      if (!grow) {
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) new_max[h] = row_max[h];
      }
    }
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      // A row with every key masked so far keeps max -inf: shift by 0 so exp2 gives 0.
      shift[h] = new_max[h] == -INFINITY ? 0.f : new_max[h];
      if (LAZY == 0 || rescale_o) {
        rescale[h] = fa_hopper2::exp2_ftz(row_max[h] - shift[h]);
        row_sum[h] *= rescale[h];
      }
      row_max[h] = new_max[h];
    }
    float part_sum[2][LANES];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h)
      CUTE_UNROLL
      for (int l = 0; l < LANES; ++l) part_sum[h][l] = 0.f;
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) {
      const int h = (i / 2) % 2;
      acc_s(i) = fa_hopper2::exp2_ftz(acc_s(i) * scale - shift[h]);
      part_sum[h][(i / 4) % LANES] += acc_s(i);
    }
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h)
      CUTE_UNROLL
      for (int l = 0; l < LANES; ++l) row_sum[h] += part_sum[h][l];
  };
  auto rescale_o_and_convert_p = [&]() {
    if (LAZY == 0 || rescale_o) {
      CUTE_UNROLL
      for (int p = 0; p < PARTS; ++p) {
        CUTE_UNROLL
        for (int i = 0; i < size(acc_o[p]); ++i) acc_o[p](i) *= rescale[(i / 2) % 2];
      }
    }
    // nvcc pairs these conversions: one F2FP.F16.F32.PACK_AB per two scores.
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) tOrP(i) = T(acc_s(i));
  };
  auto fence_all = [&]() {
    if constexpr (QREG) warpgroup_fence_operand(tSrQ);
    warpgroup_fence_operand(acc_s);
    CUTE_UNROLL
    for (int p = 0; p < PARTS; ++p) warpgroup_fence_operand(acc_o[p]);
  };

  // PINGPONG: the consumer warpgroups take turns to issue their wgmma (named barrier
  // 1 + w is warpgroup w's turn; each hands the turn to the next), so one's products
  // run alone on the tensor cores while the others do their softmax, instead of all
  // issuing at once and all waiting for everything.
  constexpr bool TURNS = PINGPONG && CONSUMERS > 1;
  auto my_turn = [&]() {
    if constexpr (TURNS) cutlass::arch::NamedBarrier::sync(256, 1 + consumer);
  };
  auto next_turn = [&]() {
    if constexpr (TURNS) cutlass::arch::NamedBarrier::arrive(256, 1 + (consumer + 1) % CONSUMERS);
  };
  if (consumer == CONSUMERS - 1) next_turn();  // the first turn is the first warpgroup's

  // Q is handed back once the last S of a work item is done, so the next item's Q
  // loads under this one's last product and epilogue; with QREG, as soon as it is in
  // registers (start_item), so it loads under the whole item.
  auto release_q = [&]() {
    if (!QREG && tid == 0) Barrier::arrive(&q_empty);
  };
  // O / l, fp16, rows past seq not written. Value i of part p: row (i / 2) % 2, column
  // p * PV_N + 8 * (i / 4) + 2 * (tid % 4) + i % 2; pairs of columns go out as one half2.
  auto store_o = [&](const float (&sums)[2], int first_row, int head) {
    float inverse[2];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      const float sum = fa_hopper2::quad_sum(sums[h]);
      inverse[h] = sum > 0.f ? 1.f / sum : 0.f;
    }
    CUTE_UNROLL
    for (int p = 0; p < PARTS; ++p) {
      // Two 8-column blocks at a time: the threads of a pair swap one half2 so that each
      // holds four consecutive columns, and a quad writes 32 bytes of a row, a whole
      // sector. (A half2 per thread fills half a sector per row; on the H200 that was 13%
      // slower on 32x32x512x128.)
      const bool odd = tid & 1;
      CUTE_UNROLL
      for (int i = 0; i < size(acc_o[p]); i += 8) {
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) {
          const __half2 left =
              __floats2half2_rn(acc_o[p](i + 2 * h) * inverse[h], acc_o[p](i + 2 * h + 1) * inverse[h]);
          const __half2 right =
              __floats2half2_rn(acc_o[p](i + 4 + 2 * h) * inverse[h], acc_o[p](i + 5 + 2 * h) * inverse[h]);
          const uint32_t mine_left = reinterpret_cast<const uint32_t &>(left);
          const uint32_t mine_right = reinterpret_cast<const uint32_t &>(right);
          const uint32_t theirs = __shfl_xor_sync(0xffffffff, odd ? mine_left : mine_right, 1);
          const int r = first_row + row + 8 * h;
          if (r < seq) {
            // Even threads: their columns of the left block and the next two; odd
            // threads: the previous two of the right block and theirs.
            const int col = p * PV_N + 8 * (i / 4) + (odd ? 8 + 2 * (tid % 4) - 2 : 2 * (tid % 4));
            const uint2 four = odd ? make_uint2(theirs, mine_right) : make_uint2(mine_left, theirs);
            *reinterpret_cast<uint2 *>(o + (size_t(head) * seq + r) * D + col) = four;
          }
        }
      }
    }
  };
  // The work item's rows and tiles, once slot() has set m0 and bh; its Q is waited for.
  auto start_item = [&](int local) {
    q_row0 = m0 + consumer * 64;
    tiles = tiles_of(m0);
    TxBarrier::wait(&q_full, local & 1);
    if constexpr (QREG) {
      // Each thread hands back its own reads (an arrive orders them before the next
      // TMA write of Q).
      warpgroup_fence_operand(tSrQ);
      copy(q_copy, q_thr_copy.partition_S(sQ), q_thr_copy.retile_D(tSrQ));
      warpgroup_fence_operand(tSrQ);
      Barrier::arrive(&q_empty);
    }
  };

  // A new work item's row statistics (O is cleared apart).
  auto reset_rows = [&]() {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
  };
  // S of ring use g (tile t of the item) alone, waited for, its softmax and P: a
  // pipeline's first tile, or every tile without PIPELINE.
  auto s_alone = [&](int g, int t) {
    fence_all();
    my_turn();
    warpgroup_arrive();
    issue_s(g);
    next_turn();
    warpgroup_wait<0>();
    fence_all();
    if (t == tiles - 1) release_q();
    softmax(t);
    rescale_o_and_convert_p();
  };
  // O += P V of ring use g alone, waited for, its stage handed back: a pipeline's last
  // tile, or every tile without PIPELINE.
  auto o_alone = [&](int g) {
    fence_all();
    my_turn();
    warpgroup_arrive();
    issue_o(g);
    next_turn();
    warpgroup_wait<0>();
    fence_all();
    if (tid == 0) Barrier::arrive(&empty[g % STAGES]);
  };
  // A pipelined step: S of ring use g (tile t of the current item) issued with O += P V
  // of use `prev`, the softmax of S under that product. `before_softmax` runs once S is
  // done, `before_rescale` once the product is.
  auto step = [&](int g, int prev, int t, auto before_softmax, auto before_rescale) {
    fence_all();
    my_turn();
    warpgroup_arrive();
    issue_s(g);
    issue_o(prev);
    next_turn();
    warpgroup_wait<1>();  // S of use g
    warpgroup_fence_operand(acc_s);
    if (t == tiles - 1) release_q();
    before_softmax();
    softmax(t);
    warpgroup_wait<0>();  // O += P V of use prev: its K and V go back
    fence_all();
    if (tid == 0) Barrier::arrive(&empty[prev % STAGES]);
    before_rescale();
    rescale_o_and_convert_p();
  };

  if constexpr (CARRY) {
    // One pipeline over every tile of every item this block takes (g counts the ring's
    // uses): each step issues S of the next tile with O += P V of the one before,
    // whichever items they belong to. At an item boundary the finished item's O is
    // stored once its last product is done, after the next item's first softmax, and
    // that softmax's rescale by exp2(-inf) = 0 clears O. Q is in registers (QREG), so
    // the next item's Q is there before this item's last product is issued.
    static_assert(QREG && PIPELINE, "CARRY needs QREG and PIPELINE");
    int n = 0, local = 0, got;
    while ((got = slot(n, m0, bh)) == 2) ++n;
    if (got == 0) return;
    start_item(local);
    CUTE_UNROLL
    for (int p = 0; p < PARTS; ++p) clear(acc_o[p]);
    reset_rows();
    s_alone(0, 0);
    int prev = 0, g = 1, t = 1;
    while (true) {
      const int done_row0 = q_row0, done_bh = bh;
      const float done_sum[2] = {row_sum[0], row_sum[1]};
      const bool next_item = t == tiles;
      if (next_item) {
        ++local;
        while ((got = slot(++n, m0, bh)) == 2) {
        }
        if (got == 0) break;
        start_item(local);
        t = 0;
      }
      step(
          g, prev, t,
          [&]() {
            if (next_item) reset_rows();
          },
          [&]() {
            if (next_item) store_o(done_sum, done_row0, done_bh);
          });
      prev = g++;
      ++t;
    }
    o_alone(prev);
    store_o(row_sum, q_row0, bh);
    return;
  }

  int local = 0;
  for (int n = 0;; ++n) {
    const int got = slot(n, m0, bh);
    if (got == 0) break;
    if (got == 2) continue;
    start_item(local);
    CUTE_UNROLL
    for (int p = 0; p < PARTS; ++p) clear(acc_o[p]);
    reset_rows();
    if constexpr (PIPELINE) {
      // The pipeline within the warpgroup: S of tile t is issued before O += P V of tile
      // t - 1, so the softmax of tile t runs while the tensor cores do that product.
      s_alone(ring, 0);
      for (int t = 1; t < tiles; ++t) step(ring + t, ring + t - 1, t, [] {}, [] {});
      o_alone(ring + tiles - 1);
    } else {
      // One tile at a time: S, its softmax, O += P V; the other consumer warpgroups (and
      // with one consumer, the other block on the SM) fill the tensor cores meanwhile.
      for (int t = 0; t < tiles; ++t) {
        s_alone(ring + t, t);
        o_alone(ring + t);
      }
    }

    store_o(row_sum, q_row0, bh);
    ring += tiles;
    ++local;
  }
}
