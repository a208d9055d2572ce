// FlashAttention forward for Hopper (sm_90a): wgmma for both products, TMA for the tiles.
//
// O = softmax(Q K^T / sqrt(D)) V, fp16 Q, K, V, O laid out [batch, heads, seq, D]
// contiguous, fp32 scores, softmax statistics and accumulation; any seq (tails masked);
// CAUSAL = 1 masks keys after the query. The same contract as kernels/flash_attn, and
// the same entry name: this kernel is its variant (kernel.toml's variant_of), and kart
// makes the tensor maps and the head count from the caller's pointers and problem
// ([launch.args]), so both are called alike.
//
// A block computes BM = 64 * CONSUMERS query rows of one (batch, head) at a time and
// stays resident for several (a persistent kernel: the grid is what fits on the GPU,
// SMS blocks or twice that). A producer warp issues TMA copies through three tensor
// maps over [batch * heads, seq, D] (rows past seq read as zeros): a work item's Q,
// then K and V tiles of BN rows into a ring of STAGES stages (k_full[s] and v_full[s]
// count their bytes in, empty[s] counts the consumers out). Each consumer warpgroup
// owns 64 query rows: S = Q K^T by wgmma from shared memory, the online softmax in
// base 2 on S's registers, then O += P V with P straight from registers (the
// accumulator's layout is the A operand's, converted to fp16) and V from shared memory.
// With PIPELINE the tiles are pipelined within a warpgroup: S of tile t is issued
// before O += P V of tile t - 1, and the softmax of tile t runs while the tensor cores
// do that product. A 64-column chunk of D is one 128-byte swizzle row, so D = 128
// tiles are two chunks; with WIDE = 0 each chunk of V is its own N = 64 product, with
// WIDE = 1 one N = D product spans both chunks (the descriptor steps from one chunk to
// the next). With one consumer warpgroup two blocks share an SM (one's loads and
// epilogue under the other's math). With CARRY the pipeline runs on across work items:
// S of an item's first tile goes out with O += P V of the previous item's last tile,
// whose epilogue then runs under this warpgroup's next products (Q has two buffers, so
// the next item's Q is there in time).
// The epilogue writes O with 8-byte stores that fill whole 32-byte sectors (the threads
// of a pair swap half their values first). With TREE the softmax keeps four partial
// maxima and sums per row, shorter dependency chains.
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

namespace fa_hopper {

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

}  // namespace fa_hopper

template <int D, int BN, int CONSUMERS, int STAGES, int CAUSAL, int PIPELINE, int PINGPONG, int WIDE,
          int CARRY, int TREE>
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

  // Shared memory: QBUFS buffers of Q, each CONSUMERS x CHUNKS tiles of 64 x 64, then
  // per stage K and V as CHUNKS tiles of BN x 64 each; every tile in TMA's 128-byte
  // swizzle.
  constexpr int QBUFS = 1 + CARRY;
  extern __shared__ uint8_t dynamic_smem[];
  T *base = reinterpret_cast<T *>((reinterpret_cast<uintptr_t>(dynamic_smem) + 1023) & ~uintptr_t(1023));
  T *q_smem = base;
  T *k_smem = q_smem + QBUFS * BM * D;
  T *v_smem = k_smem + STAGES * BN * D;
  __shared__ uint64_t q_full[QBUFS], q_empty[QBUFS], k_full[STAGES], v_full[STAGES], empty[STAGES];

  // Read through a shuffle so the compiler knows it is the same in the whole warp (wgmma
  // under a branch it cannot prove uniform gets serialized).
  const int warpgroup = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
  const int key_tiles = (seq + BN - 1) / BN;
  // Work items are (query block, batch x head) pairs, taken in turn by the resident
  // blocks (the grid is at most what fits on the GPU at once). Consecutive items are
  // the query blocks of one head, so the blocks running at once share heads and read
  // each K and V tile from L2 rather than DRAM (items ordered head-first made every
  // running block stream its own head: DRAM at 77-85%, measured); within a head the
  // last query blocks come first (under causal masking they have the most keys), and
  // that order turns by one for each pass of the grid over the heads, so a block does
  // not get a query block of the same length on every pass (with 132 blocks and 4 query
  // blocks a head it did: causal rows ran at the pace of the blocks with the longest
  // items). The turn is the same for a whole head, so each head's items stay a
  // permutation of its query blocks.
  const int query_blocks = (seq + BM - 1) / BM;
  const int work = query_blocks * heads;
  auto decode = [&](int item, int &m0, int &bh) {
    bh = item / query_blocks;
    const int turn = CAUSAL ? bh * query_blocks / gridDim.x : 0;
    m0 = (query_blocks - 1 - (item + turn) % query_blocks) * BM;
  };
  // Causal: the keys up to the block's last query row.
  auto tiles_of = [&](int m0) { return CAUSAL ? min(key_tiles, (m0 + BM + BN - 1) / BN) : key_tiles; };

  if (threadIdx.x == 0) {
    for (int b = 0; b < QBUFS; ++b) {
      TxBarrier::init(&q_full[b], 1);
      Barrier::init(&q_empty[b], CONSUMERS);
    }
    for (int s = 0; s < STAGES; ++s) {
      TxBarrier::init(&k_full[s], 1);
      TxBarrier::init(&v_full[s], 1);
      Barrier::init(&empty[s], CONSUMERS);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<fa_hopper::Registers<CONSUMERS>::producer>();
    if (threadIdx.x == 0) {
      // The ring of K and V stages runs on across work items (`it` counts its uses), so
      // the next item's first tiles load under this item's last math and epilogue.
      int it = 0, local = 0;
      for (int item = blockIdx.x; item < work; item += gridDim.x, ++local) {
        int m0, bh;
        decode(item, m0, bh);
        const int b = local % QBUFS;
        if (local >= QBUFS) Barrier::wait(&q_empty[b], (local / QBUFS - 1) & 1);
        TxBarrier::arrive_and_expect_tx(&q_full[b], BM * D * 2);
        for (int w = 0; w < CONSUMERS; ++w)
          for (int c = 0; c < CHUNKS; ++c)
            SM90_TMA_LOAD_3D::copy(&tma_q, &q_full[b], 0, q_smem + b * BM * D + (w * CHUNKS + c) * 64 * 64, c * 64,
                                   m0 + w * 64, bh);
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
      }
    }
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<fa_hopper::Registers<CONSUMERS>::consumer>();

  const int consumer = warpgroup - 1;
  const int tid = threadIdx.x % 128;
  // This thread's rows of the 64-row tile (wgmma's accumulator layout): `row` and row + 8.
  const int row = (tid / 32) * 16 + (tid / 4) % 8;
  // The current work item (set at the top of each).
  int m0 = 0, bh = 0, q_row0 = 0, tiles = 0, ring = 0;  // ring: K/V stages used before this item
  int qb = 0;                                             // its Q buffer

  // S = Q K^T: M = 64, N = BN, K = D, both operands K-major in shared memory.
  using SOp = decltype(GMMA::ss_op_selector<T, T, float, Shape<_64, Int<BN>, Int<D>>>());
  TiledMMA s_mma = make_tiled_mma(SOp{});
  auto s_thr = s_mma.get_thread_slice(tid);
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
    Tensor sQ = make_tensor(make_smem_ptr(q_smem + qb * BM * D + consumer * CHUNKS * 64 * 64),
                            tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, make_shape(_64{}, Int<D>{})));
    Tensor tSrQ = s_thr.make_fragment_A(s_thr.partition_A(sQ));
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
  auto softmax = [&](int t) {
    // Mask keys past seq, and (causal) keys after the query, only in tiles that have any.
    const int k0 = t * BN;
    if (k0 + BN > seq || (CAUSAL && k0 + BN - 1 > q_row0)) {
      CUTE_UNROLL
      for (int i = 0; i < size(acc_s); ++i) {
        const int r = q_row0 + row + 8 * ((i / 2) % 2);
        const int col = k0 + 8 * (i / 4) + 2 * (tid % 4) + i % 2;
        if (col >= seq || (CAUSAL && col > r)) acc_s(i) = -INFINITY;
      }
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
    float shift[2];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      const float new_max = fmaxf(row_max[h], fa_hopper::quad_max(tile_max[h]) * scale);
      // A row with every key masked so far keeps max -inf: shift by 0 so exp2 gives 0.
      shift[h] = new_max == -INFINITY ? 0.f : new_max;
      rescale[h] = fa_hopper::exp2_ftz(row_max[h] - shift[h]);
      row_max[h] = new_max;
      row_sum[h] *= rescale[h];
    }
    float part_sum[2][LANES];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h)
      CUTE_UNROLL
      for (int l = 0; l < LANES; ++l) part_sum[h][l] = 0.f;
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) {
      const int h = (i / 2) % 2;
      acc_s(i) = fa_hopper::exp2_ftz(acc_s(i) * scale - shift[h]);
      part_sum[h][(i / 4) % LANES] += acc_s(i);
    }
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h)
      CUTE_UNROLL
      for (int l = 0; l < LANES; ++l) row_sum[h] += part_sum[h][l];
  };
  auto rescale_o_and_convert_p = [&]() {
    CUTE_UNROLL
    for (int p = 0; p < PARTS; ++p) {
      CUTE_UNROLL
      for (int i = 0; i < size(acc_o[p]); ++i) acc_o[p](i) *= rescale[(i / 2) % 2];
    }
    CUTE_UNROLL
    for (int i = 0; i < size(acc_s); ++i) tOrP(i) = T(acc_s(i));
  };
  auto fence_all = [&]() {
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
  // loads under this one's last product and epilogue.
  auto release_q = [&]() {
    if (tid == 0) Barrier::arrive(&q_empty[qb]);
  };
  // O / l, fp16, rows past seq not written. Value i of part p: row (i / 2) % 2, column
  // p * PV_N + 8 * (i / 4) + 2 * (tid % 4) + i % 2; pairs of columns go out as one half2.
  auto store_o = [&](const float (&sums)[2], int first_row, int head) {
    float inverse[2];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      const float sum = fa_hopper::quad_sum(sums[h]);
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
  auto start_item = [&](int item, int local) {
    decode(item, m0, bh);
    q_row0 = m0 + consumer * 64;
    tiles = tiles_of(m0);
    qb = local % QBUFS;
    TxBarrier::wait(&q_full[qb], (local / QBUFS) & 1);
  };

  // A new work item's row statistics (O is cleared apart: with CARRY the first rescale,
  // by exp2(-inf) = 0, clears it).
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
    // One pipeline over every tile of every item this block takes (g counts them):
    // each step issues S of the next tile and O += P V of the one before, whichever
    // items they belong to. At an item boundary the finished item's epilogue runs after
    // the first softmax of the next, and the softmax's rescale by exp2(-inf) = 0 clears
    // O for the new item.
    int item = blockIdx.x, local = 0;
    if (item >= work) return;
    start_item(item, local);
    CUTE_UNROLL
    for (int p = 0; p < PARTS; ++p) clear(acc_o[p]);
    reset_rows();
    int g = 0;
    s_alone(g, 0);
    int prev = g++, t = 1;
    while (true) {
      const int done_row0 = q_row0, done_bh = bh;
      const float done_sum[2] = {row_sum[0], row_sum[1]};
      const bool next_item = t == tiles;
      if (next_item) {
        item += gridDim.x;
        ++local;
        if (item >= work) break;
        start_item(item, local);
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
  for (int item = blockIdx.x; item < work; item += gridDim.x, ++local) {
    start_item(item, local);
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
  }
}
