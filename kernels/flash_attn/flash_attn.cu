// FlashAttention forward, fp16 in and out, fp32 softmax statistics and accumulation.
//
// O = softmax(Q K^T / sqrt(HEAD_DIM)) V for Q, K, V, O laid out [batch, heads, seq, HEAD_DIM]
// contiguous; any seq_len (tails masked); CAUSAL = 1 masks keys after the query.
//
// One block computes BLOCK_M query rows of one (batch, head); each of its NUM_WARPS warps
// owns ROWS = BLOCK_M / NUM_WARPS rows (16 or 32: one or two m16 tiles). K and V stream
// through shared memory in BLOCK_N-row tiles, double-buffered with cp.async; the tensor
// cores do both products with mma.sync.m16n8k16 (fp16 x fp16 -> fp32), operands loaded
// with ldmatrix from an XOR-swizzled layout (16-byte chunk c of row r lives at c ^ (r % 8),
// so the 8 rows an ldmatrix phase reads hit 8 different bank groups). The softmax is the
// online one, in base 2 with the scale folded into one multiply.
//
// Grid: (ceil(seq_len / BLOCK_M), batch * heads). Block: NUM_WARPS * 32 threads.
// Dynamic shared memory: (BLOCK_M + 4 * BLOCK_N) * HEAD_DIM * 2 bytes (see kart_fa_smem).

#include <cuda_fp16.h>
#include <stdint.h>

#ifndef HEAD_DIM
#error "HEAD_DIM, CAUSAL, BLOCK_M, BLOCK_N and NUM_WARPS come from kernel.toml's grid"
#endif

constexpr int D = HEAD_DIM;
constexpr int THREADS = NUM_WARPS * 32;
constexpr int ROWS = BLOCK_M / NUM_WARPS;   // query rows per warp
constexpr int MT = ROWS / 16;               // m16 tiles per warp
constexpr int NT = BLOCK_N / 8;             // n8 tiles of S per warp row tile
constexpr int DT = D / 8;                   // n8 tiles of O
constexpr int KS = D / 16;                  // k16 steps of Q K^T
constexpr int CHUNKS = D / 8;               // 16-byte chunks per row
static_assert(ROWS % 16 == 0 && MT >= 1 && MT <= 2, "BLOCK_M / NUM_WARPS must be 16 or 32");
static_assert(BLOCK_N % 16 == 0, "BLOCK_N must be a multiple of 16");
static_assert(D == 64 || D == 128, "HEAD_DIM is 64 or 128");
// Q's fragments stay in registers unless that would not leave room for the scores and
// the output (two m16 tiles of HEAD_DIM 128: 64 more registers per thread); then they
// are read from shared memory at each k-step, as the K fragments are.
constexpr bool Q_IN_REGS = MT == 1 || D == 64;

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][D] fp16 tile.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
    return (uint32_t)(row * D + ((chunk ^ (row & 7)) << 3)) * 2u;
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
    // src-size 0 fills the 16 bytes with zeros (rows past the end of the sequence).
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1,
                                            uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1,
                                                  uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// c += a * b for one m16n8k16 tile.
__device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

// Copies rows [row0, row0 + ROWS_) of one head's [seq][D] matrix into a swizzled tile;
// rows at or past seq_len are zero-filled.
template <int ROWS_>
__device__ __forceinline__ void load_tile(uint32_t tile, const half* head, int row0, int seq_len) {
    for (int i = threadIdx.x; i < ROWS_ * CHUNKS; i += THREADS) {
        int r = i / CHUNKS, c = i % CHUNKS;
        int row = row0 + r;
        bool valid = row < seq_len;
        const half* src = head + (size_t)(valid ? row : 0) * D + c * 8;
        cp_async16(tile + swz(r, c), src, valid);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
kart_flash_attn_fwd(const half* __restrict__ q, const half* __restrict__ k,
                    const half* __restrict__ v, half* __restrict__ o, int seq_len) {
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t s_base = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t sQ = s_base;
    const uint32_t sK = sQ + BLOCK_M * D * 2;            // 2 stages
    const uint32_t sV = sK + 2 * BLOCK_N * D * 2;        // 2 stages
    const uint32_t stage_bytes = BLOCK_N * D * 2;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int m_block = blockIdx.x;
    const size_t head_off = (size_t)blockIdx.y * seq_len * D;
    const half* qh = q + head_off;
    const half* kh = k + head_off;
    const half* vh = v + head_off;
    half* oh = o + head_off;
    const int q0 = m_block * BLOCK_M;

    // How many key tiles this block needs: all of them, or up to the diagonal.
    int n_tiles = (seq_len + BLOCK_N - 1) / BLOCK_N;
    if (CAUSAL) {
        int last = min(seq_len, q0 + BLOCK_M);
        n_tiles = min(n_tiles, (last + BLOCK_N - 1) / BLOCK_N);
    }

    load_tile<BLOCK_M>(sQ, qh, q0, seq_len);
    load_tile<BLOCK_N>(sK, kh, 0, seq_len);
    load_tile<BLOCK_N>(sV, vh, 0, seq_len);
    cp_async_commit();

    // Q fragments (kept for the whole key loop when Q_IN_REGS).
    uint32_t qf[Q_IN_REGS ? MT : 1][Q_IN_REGS ? KS : 1][4];
    float acc[MT][DT][4];
    float row_max[MT][2], row_sum[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
            acc[mt][dt][0] = acc[mt][dt][1] = acc[mt][dt][2] = acc[mt][dt][3] = 0.f;
        row_max[mt][0] = row_max[mt][1] = -INFINITY;
        row_sum[mt][0] = row_sum[mt][1] = 0.f;
    }
    // log2(e) / sqrt(D): softmax in base 2 with the scale folded in.
    const float scale_log2 = 1.4426950408889634f * rsqrtf((float)D);
    const int j8 = lane >> 3;  // which 8x8 matrix this lane addresses in an x4 ldmatrix

    for (int t = 0; t < n_tiles; ++t) {
        const int stage = t & 1;
        if (t + 1 < n_tiles) {
            load_tile<BLOCK_N>(sK + (stage ^ 1) * stage_bytes, kh, (t + 1) * BLOCK_N, seq_len);
            load_tile<BLOCK_N>(sV + (stage ^ 1) * stage_bytes, vh, (t + 1) * BLOCK_N, seq_len);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        if (Q_IN_REGS && t == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int r = warp * ROWS + mt * 16 + (lane & 7) + (j8 & 1) * 8;
#pragma unroll
                for (int ks = 0; ks < KS; ++ks)
                    ldmatrix_x4(sQ + swz(r, ks * 2 + (j8 >> 1)), qf[mt][ks][0], qf[mt][ks][1],
                                qf[mt][ks][2], qf[mt][ks][3]);
            }
        }
        const uint32_t kt = sK + stage * stage_bytes;
        const uint32_t vt = sV + stage * stage_bytes;

        // S = Q K^T for this warp's rows and the tile's BLOCK_N keys.
        float s[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            uint32_t qk[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if (Q_IN_REGS) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) qk[mt][e] = qf[Q_IN_REGS ? mt : 0][Q_IN_REGS ? ks : 0][e];
                } else {
                    const int r = warp * ROWS + mt * 16 + (lane & 7) + (j8 & 1) * 8;
                    ldmatrix_x4(sQ + swz(r, ks * 2 + (j8 >> 1)), qk[mt][0], qk[mt][1], qk[mt][2],
                                qk[mt][3]);
                }
            }
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                uint32_t b0, b1, b2, b3;
                const int r = np * 16 + (lane & 7) + (j8 >> 1) * 8;
                ldmatrix_x4(kt + swz(r, ks * 2 + (j8 & 1)), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma(s[mt][2 * np], qk[mt], b0, b1);
                    mma(s[mt][2 * np + 1], qk[mt], b2, b3);
                }
            }
        }

        // Mask keys past the end and, when causal, after the query.
        const int key0 = t * BLOCK_N;
        const bool edge = key0 + BLOCK_N > seq_len || (CAUSAL && key0 + BLOCK_N > q0);
        if (edge) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int key = key0 + nt * 8 + (lane & 3) * 2 + (e & 1);
                        const int row = q0 + warp * ROWS + mt * 16 + (lane >> 2) + (e >> 1) * 8;
                        if (key >= seq_len || (CAUSAL && key > row)) s[mt][nt][e] = -INFINITY;
                    }
        }

        // Online softmax: new running max, rescale what was accumulated, P = exp2(S - max).
        uint32_t p[MT][NT / 2][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float mx = row_max[mt][h];
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
                    mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]) * scale_log2);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
                // A row with every key masked so far keeps max -inf: subtract 0 instead.
                const float base = mx == -INFINITY ? 0.f : mx;
                const float correction = exp2f(row_max[mt][h] - base);
                row_max[mt][h] = mx;
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const float p0 = exp2f(s[mt][nt][2 * h] * scale_log2 - base);
                    const float p1 = exp2f(s[mt][nt][2 * h + 1] * scale_log2 - base);
                    s[mt][nt][2 * h] = p0;
                    s[mt][nt][2 * h + 1] = p1;
                    sum += p0 + p1;
                }
                row_sum[mt][h] = row_sum[mt][h] * correction + sum;
#pragma unroll
                for (int dt = 0; dt < DT; ++dt) {
                    acc[mt][dt][2 * h] *= correction;
                    acc[mt][dt][2 * h + 1] *= correction;
                }
            }
            // The S accumulator layout is the A-operand layout of the next product.
#pragma unroll
            for (int kk = 0; kk < NT / 2; ++kk) {
                p[mt][kk][0] = pack_half2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                p[mt][kk][1] = pack_half2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                p[mt][kk][2] = pack_half2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                p[mt][kk][3] = pack_half2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
        }

        // O += P V.
#pragma unroll
        for (int kk = 0; kk < NT / 2; ++kk) {
#pragma unroll
            for (int dp = 0; dp < DT / 2; ++dp) {
                uint32_t b0, b1, b2, b3;
                const int r = kk * 16 + (lane & 7) + (j8 & 1) * 8;
                ldmatrix_x4_trans(vt + swz(r, dp * 2 + (j8 >> 1)), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma(acc[mt][2 * dp], p[mt][kk], b0, b1);
                    mma(acc[mt][2 * dp + 1], p[mt][kk], b2, b3);
                }
            }
        }
        __syncthreads();  // the next iteration's copies overwrite this stage
    }

    // O = acc / row_sum, fp16, rows past the end skipped.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        row_sum[mt][0] += __shfl_xor_sync(0xffffffff, row_sum[mt][0], 1);
        row_sum[mt][0] += __shfl_xor_sync(0xffffffff, row_sum[mt][0], 2);
        row_sum[mt][1] += __shfl_xor_sync(0xffffffff, row_sum[mt][1], 1);
        row_sum[mt][1] += __shfl_xor_sync(0xffffffff, row_sum[mt][1], 2);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = q0 + warp * ROWS + mt * 16 + (lane >> 2) + h * 8;
            if (row >= seq_len) continue;
            const float inv = row_sum[mt][h] > 0.f ? 1.f / row_sum[mt][h] : 0.f;
            half* dst = oh + (size_t)row * D + (lane & 3) * 2;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
                *reinterpret_cast<__half2*>(dst + dt * 8) =
                    __floats2half2_rn(acc[mt][dt][2 * h] * inv, acc[mt][dt][2 * h + 1] * inv);
        }
    }
}
