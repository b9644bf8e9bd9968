// Fused attention, Y = softmax(scale * Q K^T + bias) V per matrix, without writing the T x S
// scores to global memory. FP16/BF16 with head size 16, 32, 64, 80 or 128 (V's as wide; for 16
// and 32 also V 2 or 4 times as wide, LeViT's): flash-attention
// kernels on the tensor cores (mma.sync m16n8k16, FP32 accumulation, the online softmax of
// FlashAttention-2: each warp owns 16 query rows, keys 64 at a time): k_flash streams K and V
// tiles through shared memory; k_flash_res (head size 64, no bias, a few hundred keys: the ViTs)
// keeps whole matrices' K and V resident and hands out rows to warps as they come free.
// Otherwise (FP32, other head sizes): one block per query row, the row's scores in shared
// memory. On an H100 the ViTs' shapes (head size 64, up to 272 keys, no bias) go to the wgmma
// kernel of cuda/attention_sm90.cu first. Cosine attention (Swin V2: q and k L2-normalised, q
// scaled per head) runs on k_flash, which normalises Q and each K tile in shared memory as they
// land, or on the row-by-row kernel. The CPU twin is si_cpu_attention (src/cpu/kernels.c).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "cuda/attention.cuh"
#include "cuda/attention90.cuh"
#include "cuda/elem.cuh"
#include "cuda/ptx.cuh"
#include "engine/kernel_math.h"

namespace {

constexpr int BN = 64, PAD = 8; // keys per tile, smem row padding (conflict-free ldmatrix)

template <typename T> __device__ inline uint32_t pack2(float a, float b);
template <> __device__ inline uint32_t pack2<__half>(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <> __device__ inline uint32_t pack2<__nv_bfloat16>(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

template <typename T>
__device__ inline void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
template <>
__device__ inline void mma<__half>(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ inline void mma<__nv_bfloat16>(float c[4], const uint32_t a[4], uint32_t b0,
                                          uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// cp16s to a generic pointer into shared memory
__device__ inline void cp16(void *sm, const void *g, bool valid) {
    cp16s((uint32_t)__cvta_generic_to_shared(sm), g, valid);
}

// rows x D tile of a (rows_total, D) matrix whose rows are ld apart into smem [rows][D + PAD]
// (zeros beyond rows_total), asynchronously; rows start on 16 bytes (D and ld are multiples of 8)
template <typename T, int D>
__device__ inline void load_rows(T *sm, const T *g, int ld, int r0, int rows_total, int rows) {
    constexpr int V = D / 8; // 16-byte chunks per row; 32-bit offsets (flash_fits)
    for (int i = threadIdx.x; i < rows * V; i += blockDim.x) {
        int r = i / V, c = i % V;
        bool ok = r0 + r < rows_total;
        cp16(sm + r * (D + PAD) + c * 8, ok ? g + ((r0 + r) * ld + c * 8) : g, ok);
    }
}

// the same tile of K read from K^T (D, S), rows ld apart: element loads walking s, coalesced
template <typename T, int D>
__device__ inline void load_kt(T *sm, const T *kt, int ld, int s0, int S) {
    for (int i = threadIdx.x; i < BN * D; i += blockDim.x) {
        int d = i / BN, s = i % BN;
        sm[s * (D + PAD) + d] = s0 + s < S ? kt[d * ld + s0 + s] : si_from_f<T>(0.f);
    }
}

// Cosine attention: rows [0, rows) of a tile in shared memory, D + PAD apart, to
// x f / max(|x|, eps) (the RowNorm it replaces: FP32 sums, the result rounded to T) by threads
// tid of nthr (a multiple of 32): TPR threads a row, each PER 16-byte chunks of it, every row of
// a pass at once (a warp a row, its shuffles one after the other, cost Swin V2 more than the
// RowNorm nodes saved).
template <typename T, int D>
__device__ inline void norm_rows(T *sm, int rows, int tid, int nthr, float eps, float f) {
    constexpr int CH = D / 8, TPR = CH % 4 == 0 ? 4 : 2, PER = CH / TPR;
    static_assert(D % 16 == 0 && CH % TPR == 0, "rows of whole 16-byte chunks, evenly shared");
    for (int base = 0; base < rows; base += nthr / TPR) {
        const int r = base + tid / TPR;
        const bool live = r < rows; // every lane shuffles; those past the tile hold zeros
        T *row = sm + (live ? r : 0) * (D + PAD) + tid % TPR * PER * 8;
        uint4 c[PER];
        float ss = 0.f;
#pragma unroll
        for (int i = 0; i < PER; i++) {
            c[i] = live ? *reinterpret_cast<const uint4 *>(row + i * 8) : make_uint4(0, 0, 0, 0);
            const T *e = reinterpret_cast<const T *>(&c[i]);
#pragma unroll
            for (int k = 0; k < 8; k++) ss = fmaf(si_to_f(e[k]), si_to_f(e[k]), ss);
        }
#pragma unroll
        for (int o = 1; o < TPR; o *= 2) ss += __shfl_xor_sync(0xffffffff, ss, o);
        const float g = f / fmaxf(sqrtf(ss), eps);
        if (!live) continue;
#pragma unroll
        for (int i = 0; i < PER; i++) {
            T *e = reinterpret_cast<T *>(&c[i]);
#pragma unroll
            for (int k = 0; k < 8; k++) e[k] = si_from_f<T>(si_to_f(e[k]) * g);
            *reinterpret_cast<uint4 *>(row + i * 8) = c[i];
        }
    }
}

// op over each row half of a warp's scores sc[nt][0..1] (row g) and sc[nt][2..3] (row g + 8),
// pairwise, so the chain is log2(2N) deep; N a power of 2
template <int N, typename Op>
__device__ inline void quad_tree(const float (&sc)[N][4], float (&r)[2], Op op) {
    float a[N], b[N];
#pragma unroll
    for (int i = 0; i < N; i++) {
        a[i] = op(sc[i][0], sc[i][1]);
        b[i] = op(sc[i][2], sc[i][3]);
    }
#pragma unroll
    for (int w = N / 2; w > 0; w /= 2)
#pragma unroll
        for (int i = 0; i < w; i++) {
            a[i] = op(a[i], a[i + w]);
            b[i] = op(b[i], b[i + w]);
        }
    r[0] = a[0];
    r[1] = b[0];
}

// four 8x8 b16 matrices from shared memory at a shared-space byte address (lanes 8i..8i+7 give
// matrix i's row addresses; constant parts of the callers' offsets fold into the instruction):
// the mma B fragments of two n-tiles at once; .trans for V, whose rows are keys
__device__ inline void ldsm_x4(uint32_t r[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ inline void ldsm_x4_t(uint32_t r[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// Where a lane's ldmatrix rows of a tile of keys are: the B fragments of Q K^T (K's rows are
// keys: key group nt's 8 keys, dims kk * 16 on) and of P V (V transposed: keys kk * 16 on, dims
// nt * 8 on), as shared-space byte addresses.
// Rows DK + PAD (K) and DV + PAD (V) elements apart (k_flash): lanes 8i..8i+7 give matrix i's
// rows.
template <typename T, int DK, int DV> struct padded_keys {
    uint32_t ka, va; // this lane's rows of the tile's first keys
    __device__ padded_keys(uint32_t k0, uint32_t v0) {
        const int lane = threadIdx.x % 32, mat = lane / 8, mr = lane % 8;
        ka = k0 + (uint32_t)((((mat >> 1) * 8 + mr) * (DK + PAD) + (mat & 1) * 8) * sizeof(T));
        va = v0 + (uint32_t)((((mat & 1) * 8 + mr) * (DV + PAD) + (mat >> 1) * 8) * sizeof(T));
    }
    __device__ uint32_t k(int nt, int kk) const {
        return ka + (uint32_t)((nt * 8 * (DK + PAD) + kk * 16) * sizeof(T));
    }
    __device__ uint32_t v(int kk, int nt) const {
        return va + (uint32_t)((kk * 16 * (DV + PAD) + nt * 8) * sizeof(T));
    }
};
// 128-byte rows (64 16-bit dims) unpadded, chunk c of row r at (c ^ r % 8) * 16: conflict-free
// ldmatrix without the padding, so more matrices fit (k_flash_res). The tile starts on a
// multiple of 8 keys, so a lane's row is mr modulo 8.
struct swizzled_keys {
    static constexpr uint32_t ROW = 128;
    uint32_t ka, va, m6, kb, vb;
    __device__ swizzled_keys(uint32_t k0, uint32_t v0) {
        const uint32_t lane = threadIdx.x % 32, mat = lane / 8, mr = lane % 8;
        ka = k0 + ((mat >> 1) * 8 + mr) * ROW;
        va = v0 + ((mat & 1) * 8 + mr) * ROW;
        m6 = (mr & 6) << 4; // chunk 2i + b, xor mr: ((2i ^ (mr & 6)) | ((b ^ mr) & 1))
        kb = (((mat & 1) ^ mr) & 1) << 4;  // b: K's chunk within the kk step
        vb = (((mat >> 1) ^ mr) & 1) << 4; // b: V's within the pair of n-tiles
    }
    __device__ uint32_t k(int nt, int kk) const {
        return ka + nt * 8 * ROW + ((((uint32_t)kk << 5) ^ m6) | kb);
    }
    __device__ uint32_t v(int kk, int nt) const {
        return va + kk * 16 * ROW + ((((uint32_t)nt << 4) ^ m6) | vb);
    }
    // where chunk c of row r goes
    static __device__ uint32_t at(int r, int c) {
        return r * ROW + ((c ^ (r & 7)) << 4);
    }
};

// One warp's 16 query rows (their A fragments qa) against a tile of up to NK keys in shared
// memory (lay: where this lane's ldmatrix rows are; zeros past S): the scores, the
// online softmax's running max m and sum l (log2 domain, exp2) and o += P V. live: the tile's
// keys inside S, s0 its first; bias NULL or the scores' bias at boff (rows row[]). Key groups
// wholly beyond live are skipped; FULL: live == NK and no bias, nothing to test.
template <typename T, int DK, int DV, int NK = BN, bool FULL = false, class L>
__device__ inline void flash_tile(const L &lay, int live, const uint32_t (&qa)[DK / 16][4],
                                  float (&o)[DV / 8][4], float (&m)[2], float (&l)[2], float sl2,
                                  const si_k_attn &p, const T *bias, int64_t boff,
                                  const int (&row)[2], int s0) {
    const int t4 = threadIdx.x % 4;
    const float LOG2E = 1.4426950408889634f;
    float sc[NK / 8][4];
#pragma unroll
    for (int nt = 0; nt < NK / 8; nt++) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
#pragma unroll
    for (int nt = 0; nt < NK / 8; nt += 2) {
        if (!FULL && nt * 8 >= live) continue; // the whole pair of key groups is padding
#pragma unroll
        for (int kk = 0; kk < DK / 16; kk++) { // K rows are keys: B[dim][key] untransposed
            uint32_t r[4];
            ldsm_x4(r, lay.k(nt, kk));
            mma<T>(sc[nt], qa[kk], r[0], r[1]);
            mma<T>(sc[nt + 1], qa[kk], r[2], r[3]);
        }
    }
    // scores in the log2 domain are sc * k2 (k2 = 1 once scaled here); the exponent below is
    // one FFMA, sc * k2 - max
    float k2 = 1.f;
    if (FULL || (!bias && live == NK && sl2 > 0.f)) { // a whole tile of keys: nothing to mask
        k2 = sl2;
    } else {
#pragma unroll
        for (int nt = 0; nt < NK / 8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int c = nt * 8 + 2 * t4 + (i & 1), r = row[i >> 1]; // key in tile, query row
                float x = sc[nt][i] * sl2;
                if (bias && r < p.t && c < live)
                    x += si_to_f(bias[boff + r * p.bst_t + (int64_t)(s0 + c) * p.bst_s]) * LOG2E;
                sc[nt][i] = c < live ? x : -INFINITY;
            }
    }
    // the row maxima and, below, sums as trees: a chain of NK / 2 dependent FMNMX or FADD
    // stalled the warps more than anything else (ncu, ViT-B's shape)
    float mx[2];
    quad_tree<NK / 8>(sc, mx, [](float x, float y) { return fmaxf(x, y); });
    // The running max moves only when a score passes it by more than 2^8 (log2 domain 8): P is
    // then at most 256, well inside FP16 and BF16, and the output's rescale is skipped while no
    // row of the warp moved (after a row's first tile, nearly always)
    float corr[2] = {1.f, 1.f};
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] *= k2;
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 2));
        if (mx[h] > m[h] + 8.f) { // also the first tile's max against -inf
            corr[h] = ex2(m[h] - mx[h]);
            m[h] = mx[h];
        }
        mx[h] = m[h] == -INFINITY ? 0.f : m[h];
    }
#pragma unroll
    for (int nt = 0; nt < NK / 8; nt++) {
        if (!FULL && (nt & ~1) * 8 >= live) { // a pair of key groups beyond S: no exponentials
            sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
            continue;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) sc[nt][i] = ex2(fmaf(sc[nt][i], k2, -mx[i >> 1]));
    }
    float sum[2];
    quad_tree<NK / 8>(sc, sum, [](float x, float y) { return x + y; });
    l[0] = fmaf(l[0], corr[0], sum[0]);
    l[1] = fmaf(l[1], corr[1], sum[1]);
    if (__any_sync(0xffffffff, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
        for (int i = 0; i < DV / 8; i++) {
            o[i][0] *= corr[0];
            o[i][1] *= corr[0];
            o[i][2] *= corr[1];
            o[i][3] *= corr[1];
        }
    }
#pragma unroll
    for (int kk = 0; kk < NK / 16; kk++) {
        if (!FULL && kk * 16 >= live) continue; // P is zero there
        uint32_t a[4] = {pack2<T>(sc[2 * kk][0], sc[2 * kk][1]),
                         pack2<T>(sc[2 * kk][2], sc[2 * kk][3]),
                         pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                         pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
        for (int nt = 0; nt < DV / 8; nt += 2) { // V rows are keys: B[key][dim] transposed
            uint32_t r[4];
            ldsm_x4_t(r, lay.v(kk, nt));
            mma<T>(o[nt], a, r[0], r[1]);
            mma<T>(o[nt + 1], a, r[2], r[3]);
        }
    }
}

// a warp's A fragments of its 16 query rows qs (rows D + PAD apart) in shared memory
template <typename T, int D>
__device__ inline void load_qa(uint32_t (&qa)[D / 16][4], const T *qs) {
    const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const T *r_lo = qs + g * (D + PAD) + kk * 16 + 2 * t4;
        const T *r_hi = r_lo + 8 * (D + PAD);
        qa[kk][0] = *reinterpret_cast<const uint32_t *>(r_lo);
        qa[kk][1] = *reinterpret_cast<const uint32_t *>(r_hi);
        qa[kk][2] = *reinterpret_cast<const uint32_t *>(r_lo + 8);
        qa[kk][3] = *reinterpret_cast<const uint32_t *>(r_hi + 8);
    }
}

// an activation on Y: the kinds si_attention_act admits (a call to si_act_eval's every case,
// out of line, spilled k_flash's accumulators: LeViT's attention ran 1.8x slower)
__device__ inline float y_act(float v, int kind) {
    return kind == SI_ACT_RELU ? (v > 0.f ? v : 0.f) : si_hardswish(v);
}

// a warp's rows row[] (those inside T) of Y = act(o / l), l the running sums of its lanes' quads
// (act: a kind of si_attention_act, or 0)
template <typename T, int D>
__device__ inline void store_o(T *yb, int64_t ld, int T_, const int (&row)[2],
                               const float (&o)[D / 8][4], float (&l)[2], int act = 0) {
    const int t4 = threadIdx.x % 4;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffff, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffff, l[h], 2);
        l[h] = l[h] > 0.f ? 1.f / l[h] : 0.f;
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (row[h] >= T_) continue;
            float a = o[nt][2 * h] * l[h], b = o[nt][2 * h + 1] * l[h];
            if (act) a = y_act(a, act), b = y_act(b, act);
            uint32_t w = pack2<T>(a, b);
            *reinterpret_cast<uint32_t *>(yb + (int64_t)row[h] * ld + nt * 8 + 2 * t4) = w;
        }
}

// blockDim.x / 32 warps (at most 8), 16 query rows each; K and V tiles double-buffered: tile
// i+1 loads while i computes. Scores are kept in the log2 domain (exp2). Key groups wholly
// beyond S (the last tile's padding) are skipped.
// NORM: cosine attention, Q's rows and each K tile's normalised in shared memory as they land.
template <typename T, int DK, int DV, bool NORM = false>
__global__ void __launch_bounds__(256, DK <= 64 && DV <= 64 ? 2 : 1)
    k_flash(si_k_attn p, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
            const T *__restrict__ bias, T *__restrict__ y, int row_blocks) {
    constexpr int TK = BN * (DK + PAD), TV = BN * (DV + PAD); // a K and a V tile
    const int M = blockDim.x / 2;                             // 16 rows per warp
    extern __shared__ __align__(16) unsigned char smem[];
    T *qs = reinterpret_cast<T *>(smem), *kv = qs + M * (DK + PAD); // kv: [2][K tile, V tile]
    // a matrix's row blocks side by side (they share K and V in L2), matrices after each other
    const int64_t b = blockIdx.x / row_blocks;
    const int T_ = (int)p.t, S = (int)p.s, q0 = (int)(blockIdx.x % row_blocks) * M;
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
    int64_t off[4];
    si_attn_offsets(p, b, off);
    const T *kb = k + off[1], *vb = v + off[2];
    const int tiles = (S + BN - 1) / BN, ldk = (int)p.ld[1], ldv = (int)p.ld[2];
    auto load_tile = [&](int i) {
        T *kt = kv + (i & 1) * (TK + TV), *vt = kt + TK;
        if (p.trans_b)
            load_rows<T, DK>(kt, kb, ldk, i * BN, S, BN);
        else
            load_kt<T, DK>(kt, kb, ldk, i * BN, S);
        load_rows<T, DV>(vt, vb, ldv, i * BN, S, BN);
    };
    load_rows<T, DK>(qs, q + off[0], (int)p.ld[0], q0, T_, M);
    load_tile(0);
    cp_commit();
    uint32_t qa[DK / 16][4];
    float o[DV / 8][4];
#pragma unroll
    for (int i = 0; i < DV / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const int r0 = warp * 16;
    const int row[2] = {q0 + r0 + g, q0 + r0 + g + 8};
    const int64_t boff = bias ? si_attn_bias_off(p, b) : 0;
    const float sl2 = p.scale * 1.4426950408889634f; // scores to the log2 domain
    float qf = 1.f; // cosine attention: Q's scale, read while the tiles load
    if constexpr (NORM)
        if (p.qk_scale) qf = si_to_f(static_cast<const T *>(p.qk_scale)[b / p.qs_div % p.qs_mod]);
    const uint32_t kv_sh = (uint32_t)__cvta_generic_to_shared(kv);
    for (int it = 0; it < tiles; it++) {
        if (it + 1 < tiles) load_tile(it + 1);
        cp_commit();
        cp_wait<1>(); // tile it (and Q) landed
        __syncthreads();
        if constexpr (NORM) {
            norm_rows<T, DK>(kv + (it & 1) * (TK + TV), BN, threadIdx.x, blockDim.x, p.qk_eps, 1.f);
            if (it == 0) // this warp's rows of Q
                norm_rows<T, DK>(qs + r0 * (DK + PAD), 16, threadIdx.x % 32, 32, p.qk_eps, qf);
            __syncthreads();
        }
        if (it == 0) load_qa<T, DK>(qa, qs + r0 * (DK + PAD));
        const uint32_t ks = kv_sh + (it & 1) * (TK + TV) * sizeof(T);
        flash_tile<T, DK, DV>(padded_keys<T, DK, DV>(ks, ks + TK * sizeof(T)), min(BN, S - it * BN),
                              qa, o, m, l, sl2, p, bias, boff, row, it * BN);
        __syncthreads(); // every warp is done with this buffer before it is loaded again
    }
    cp_wait<0>();               // nothing in flight at exit (S == 0 issued Q and never waited)
    si_attn_offsets(p, b, off); // again: one 64-bit offset less live through the loop (spills)
    store_o<T, DV>(y + off[3], p.ld[3], T_, row, o, l, p.act.kind);
}

// Short sequences without a bias (a ViT's 197 or DINOv2's 257 tokens): the flash kernel above
// reads each matrix's K and V once per block of query rows and waits on every 64-key tile. Here
// a persistent block of RES_WARPS warps keeps the K and V of ns (2 to 4) matrices in shared
// memory (its matrices blockIdx.x, + gridDim.x, ... in slots 0, 1, .., ns - 1 in turn) and its
// warps take units of work, 16 query rows of a matrix against all of its keys, from a counter
// in shared memory. The warp that finishes a matrix's last unit loads the matrix ns later into
// that slot (and has the L2 fetch its query rows) and marks the slot ready once the copies land;
// no barrier waits for the slowest warp. (A first version gave each warp one row tile and
// synchronised the block every matrix: 13 or 17 warps a block put 4 or 5 on one of the SM's
// four schedulers and 3 or 4 on the others, whose warps then waited at the barrier, 11% of
// ViT-B's samples in ncu. With two slots, warps waited for the next matrix's copies instead.)
constexpr int RES_WARPS = 16, RES_SLOTS = 4; // 128 registers a thread

struct res_sync {
    int next;                // the next unit to take
    int done[RES_SLOTS];     // units finished of the matrix in each slot
    int ready[RES_SLOTS];    // which of the block's matrices (0, 1, ...) a slot holds, once landed
    int64_t qoff[RES_SLOTS]; // where the slot's matrix starts in Q and in Y (their
    int64_t yoff[RES_SLOTS]; // 64-bit divisions once a matrix, not once a unit)
};

template <typename T>
__global__ void __launch_bounds__(RES_WARPS * 32, 1)
    k_flash_res(si_k_attn p, const T *__restrict__ q, const T *__restrict__ k,
                const T *__restrict__ v, T *__restrict__ y, int spad, int ns) {
    constexpr int D = 64, V = D / 8; // 128-byte rows, V 16-byte chunks each (swizzled_keys)
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ res_sync sy;
    const uint32_t KV = spad * swizzled_keys::ROW; // one operand of one matrix, bytes
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(smem); // [slot][K, V]
    const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const int T_ = (int)p.t, S = (int)p.s, tiles = (T_ + 15) / 16;
    const float sl2 = p.scale * 1.4426950408889634f;
    auto matrix = [&](int j) { return (int64_t)blockIdx.x + (int64_t)j * gridDim.x; };
    // matrix j's K and V into slot j % ns by threads first, first + step, ... (step a multiple
    // of V: each thread keeps one chunk column and walks rows); its Q rows into the L2
    auto load = [&](int j, int first, int step) {
        const int64_t b = matrix(j);
        const int c = first % V, r0 = first / V, rs = step / V;
        const uint32_t ks = base + (j % ns) * 2 * KV, vs = ks + KV;
        int64_t off[4];
        si_attn_offsets(p, b, off);
        const T *kb = k + off[1], *vb = v + off[2];
        const int ldk = (int)p.ld[1], ldv = (int)p.ld[2];
        for (int r = r0; r < spad; r += rs) {
            const bool ok = r < S;
            const uint32_t at = swizzled_keys::at(r, c);
            if (p.trans_b) cp16s(ks + at, kb + (ok ? r * ldk + c * 8 : 0), ok);
            cp16s(vs + at, vb + (ok ? r * ldv + c * 8 : 0), ok);
        }
        if (!p.trans_b) { // from K^T (D, S): element loads walking s, coalesced
            T *kt = reinterpret_cast<T *>(smem + (j % ns) * 2 * KV);
            for (int i = first; i < spad * D; i += step) {
                int d = i / spad, r = i % spad;
                kt[swizzled_keys::at(r, d / 8) / sizeof(T) + d % 8] =
                    r < S ? kb[d * ldk + r] : si_from_f<T>(0.f);
            }
        }
        cp_commit();
        if (first == 0) sy.qoff[j % ns] = off[0], sy.yoff[j % ns] = off[3];
        const T *qb = q + off[0];
        for (int r = first; r < T_; r += step)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(qb + r * p.ld[0]));
    };
    if (blockIdx.x >= p.nb) return;
    for (int j = 0; j < ns && matrix(j) < p.nb; j++) load(j, threadIdx.x, blockDim.x);
    if (threadIdx.x == 0) {
        sy.next = 0;
        for (int i = 0; i < RES_SLOTS; i++) sy.done[i] = 0, sy.ready[i] = i;
    }
    cp_wait<0>();
    __syncthreads();
    int pending = -1; // a matrix this warp loaded and has not yet marked ready
    auto publish = [&]() {
        cp_wait<0>();
        __syncwarp();
        __threadfence_block();
        if (lane == 0) *(volatile int *)&sy.ready[pending % ns] = pending;
        pending = -1;
    };
    for (;;) {
        int u = 0;
        if (lane == 0) u = atomicAdd(&sy.next, 1);
        u = __shfl_sync(0xffffffff, u, 0);
        const int j = u / tiles, t = u % tiles, slot = j % ns;
        if (matrix(j) >= p.nb) break;
        int ready = 0;
        if (lane == 0) ready = *(volatile int *)&sy.ready[slot] == j;
        if (!__shfl_sync(0xffffffff, ready, 0)) { // a warp that waits holds no load unmarked
            if (pending >= 0) publish();
            if (lane == 0)
                while (*(volatile int *)&sy.ready[slot] != j) __nanosleep(32);
        }
        __syncwarp();
        __threadfence_block();
        // this unit's 16 query rows, A fragments straight from global memory (the L2 has them)
        const int row[2] = {t * 16 + g, t * 16 + g + 8};
        uint32_t qa[D / 16][4];
        {
            const T *qb = q + sy.qoff[slot];
            const T *lo = qb + (int64_t)min(row[0], T_ - 1) * p.ld[0] + 2 * t4;
            const T *hi = qb + (int64_t)min(row[1], T_ - 1) * p.ld[0] + 2 * t4;
            const bool ok0 = row[0] < T_, ok1 = row[1] < T_;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                qa[kk][0] = ok0 ? __ldg(reinterpret_cast<const unsigned *>(lo + kk * 16)) : 0u;
                qa[kk][1] = ok1 ? __ldg(reinterpret_cast<const unsigned *>(hi + kk * 16)) : 0u;
                qa[kk][2] = ok0 ? __ldg(reinterpret_cast<const unsigned *>(lo + kk * 16 + 8)) : 0u;
                qa[kk][3] = ok1 ? __ldg(reinterpret_cast<const unsigned *>(hi + kk * 16 + 8)) : 0u;
            }
        }
        T *yb = y + sy.yoff[slot];
        float o[D / 8][4];
#pragma unroll
        for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
        const uint32_t ks = base + slot * 2 * KV, vs = ks + KV;
        for (int s0 = 0; s0 < S; s0 += BN) {
            const swizzled_keys lay(ks + s0 * swizzled_keys::ROW, vs + s0 * swizzled_keys::ROW);
            const int live = S - s0;
            const T *nb = nullptr; // no bias
            if (live >= BN)        // a whole tile; the last one as narrow as its keys
                flash_tile<T, D, D, BN, true>(lay, BN, qa, o, m, l, sl2, p, nb, 0, row, s0);
            else if (live > 32)
                flash_tile<T, D, D, BN>(lay, live, qa, o, m, l, sl2, p, nb, 0, row, s0);
            else if (live > 16)
                flash_tile<T, D, D, 32>(lay, live, qa, o, m, l, sl2, p, nb, 0, row, s0);
            else
                flash_tile<T, D, D, 16>(lay, live, qa, o, m, l, sl2, p, nb, 0, row, s0);
            // a load issued a tile ago has landed by now; the others may wait for it
            if (pending >= 0) publish();
        }
        store_o<T, D>(yb, p.ld[3], T_, row, o, l);
        __syncwarp();          // every lane's reads of the slot are done
        __threadfence_block(); // and ordered before the count (release)
        int fin = 0;
        if (lane == 0) fin = atomicAdd(&sy.done[slot], 1);
        fin = __shfl_sync(0xffffffff, fin, 0);
        if (fin == tiles - 1) {    // the slot's last reader: the matrix ns later goes there
            __threadfence_block(); // after every other reader's count (acquire)
            if (lane == 0) sy.done[slot] = 0;
            if (matrix(j + ns) < p.nb) {
                load(j + ns, lane, 32);
                pending = j + ns;
            }
        }
    }
    if (pending >= 0) publish();
    cp_wait<0>();
}

__device__ inline float block_reduce(float v, bool is_max, float *red) {
    for (int o = 16; o > 0; o /= 2) {
        float w = __shfl_xor_sync(0xffffffff, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    const int warp = threadIdx.x / 32, nw = blockDim.x / 32;
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
    for (int i = 1; i < nw; i++) v = is_max ? fmaxf(v, red[i]) : v + red[i];
    return v;
}

// one block per query row: q in shared memory, the row's S scores beside it
template <typename T>
__global__ void k_attn_rows(si_k_attn p, const T *__restrict__ q, const T *__restrict__ k,
                            const T *__restrict__ v, const T *__restrict__ bias, T *y) {
    extern __shared__ float fs[];
    float *qs = fs, *sc = fs + p.d, *red = sc + p.s;
    const int64_t b = blockIdx.x / p.t, r = blockIdx.x % p.t, S = p.s, D = p.d, Dv = p.dv;
    int64_t off[4];
    si_attn_offsets(p, b, off);
    const T *qr = q + off[0] + r * p.ld[0];
    const T *kb = k + off[1], *vb = v + off[2];
    const int64_t lk = p.ld[1], lv = p.ld[2];
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) qs[d] = si_to_f(qr[d]);
    float qf = 1.f; // cosine attention (K's rows keys): q's factor, and each key's below
    if (p.qk_eps > 0.f) {
        float ss = 0.f;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) ss += qs[d] * qs[d];
        ss = block_reduce(ss, false, red);
        qf = (p.qk_scale ? si_to_f(static_cast<const T *>(p.qk_scale)[b / p.qs_div % p.qs_mod])
                         : 1.f) /
             fmaxf(sqrtf(ss), p.qk_eps);
    }
    __syncthreads();
    const int64_t boff = bias ? si_attn_bias_off(p, b) + r * p.bst_t : 0;
    float mx = -INFINITY;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
        float acc = 0.f, kk = 0.f; // kk: the key's squared norm, for the cosine attention
        for (int64_t d = 0; d < D; d++) {
            const float kd = si_to_f(p.trans_b ? kb[s * lk + d] : kb[d * lk + s]);
            acc += qs[d] * kd;
            kk += kd * kd;
        }
        if (p.qk_eps > 0.f) acc *= qf / fmaxf(sqrtf(kk), p.qk_eps);
        acc *= p.scale;
        if (bias) acc += si_to_f(bias[boff + s * p.bst_s]);
        sc[s] = acc;
        mx = fmaxf(mx, acc);
    }
    mx = block_reduce(mx, true, red);
    float sum = 0.f;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
        float e = __expf(sc[s] - (mx == -INFINITY ? 0.f : mx));
        sc[s] = e;
        sum += e;
    }
    sum = block_reduce(sum, false, red);
    float inv = sum > 0.f ? 1.f / sum : 0.f;
    T *yr = y + off[3] + r * p.ld[3];
    for (int64_t d = threadIdx.x; d < Dv; d += blockDim.x) {
        float acc = 0.f;
        for (int64_t s = 0; s < S; s++) acc += sc[s] * si_to_f(vb[s * lv + d]);
        yr[d] = si_from_f<T>(p.act.kind ? y_act(acc * inv, p.act.kind) : acc * inv);
    }
}

// Warps per block: 16 query rows each, at most 8; the row tiles of a matrix spread evenly over
// its blocks, so a 197-token ViT runs 2 blocks of 7 warps (224 rows) rather than 2 of 8 (256),
// and Swin's 49-token windows one block of 4. At most 128 registers a thread, so two blocks share
// an SM for head sizes up to 64 (measured on the H100: 6% faster on ViT-B, 9% on DeiT-S than
// one block of 146); head size 128 keeps one block, as two would spill its accumulators.
template <typename T, int DK, int DV>
cudaError_t launch_flash(cudaStream_t s, const si_k_attn &p, const void *q, const void *k,
                         const void *v, const void *bias, void *y) {
    constexpr int WMAX = 8;
    int64_t row_tiles = (p.t + 15) / 16, blocks = (row_tiles + WMAX - 1) / WMAX;
    int w = (int)((row_tiles + blocks - 1) / blocks);
    auto bytes = [](int warps) { // Q rows, then two K and two V tiles
        return sizeof(T) * ((size_t)(16 * warps + 2 * BN) * (DK + PAD) + 2 * BN * (DV + PAD));
    };
    size_t smem = bytes(w);
    static bool attr[2] = {false, false};
    const bool norm = p.qk_eps > 0.f;
    auto kernel = norm ? k_flash<T, DK, DV, true> : k_flash<T, DK, DV>;
    if (!attr[norm]) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)bytes(WMAX));
        if (e != cudaSuccess) return e;
        attr[norm] = true;
    }
    kernel<<<(unsigned)(p.nb * blocks), w * 32, smem, s>>>(
        p, (const T *)q, (const T *)k, (const T *)v, (const T *)bias, (T *)y, (int)blocks);
    return cudaGetLastError();
}

// cp.async moves 16-byte chunks: every row and matrix of Q, K and V starts on 16 bytes; Y is
// stored two elements at a time; a matrix's rows are addressed with 32-bit offsets
template <typename T>
bool flash_fits(const si_k_attn &p, const void *q, const void *k, const void *v, const void *y) {
    const void *ptrs[4] = {q, k, v, y};
    for (int i = 0; i < 4; i++)
        if ((p.t + p.s + 128) * (p.ld[i] + 8) >= INT32_MAX ||
            !si_attn_aligned(&p, i, ptrs[i], sizeof(T), i < 3 ? 16 : 2 * sizeof(T)))
            return false;
    return true;
}

// the shared memory of one matrix's K and V in the resident kernel, bytes
size_t resident_slot(const si_k_attn &p) {
    return 2 * (size_t)((p.s + 15) / 16 * 16) * swizzled_keys::ROW;
}

// The resident kernel's matrices a block holds (head size 64): as many as the shared memory a
// block may have takes (up to RES_SLOTS); it runs where that is at least two. 0 where the
// device could not be asked (*err).
template <typename T> int resident_slots(const si_k_attn &p, cudaError_t *err) {
    static int optin = -1; // set once every query below has succeeded
    if (optin < 0) {
        int dev = 0, mem = 0;
        if ((*err = cudaGetDevice(&dev)) != cudaSuccess ||
            (*err = cudaDeviceGetAttribute(&mem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) !=
                cudaSuccess)
            return 0;
        mem -= (int)sizeof(res_sync) + 128; // the static res_sync shares the block's memory
        if ((*err = cudaFuncSetAttribute(
                 k_flash_res<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, mem)) != cudaSuccess)
            return 0;
        optin = mem;
    }
    return (int)std::min<size_t>(RES_SLOTS, (size_t)optin / resident_slot(p));
}

// as many persistent blocks of the resident kernel as the GPU has SMs
template <typename T>
cudaError_t launch_resident(cudaStream_t s, const si_k_attn &p, const void *q, const void *k,
                            const void *v, void *y) {
    static int sms = 0;
    cudaError_t err = cudaSuccess;
    const int ns = resident_slots<T>(p, &err);
    if (ns < 2) return err != cudaSuccess ? err : cudaErrorInvalidValue;
    if (sms == 0) {
        int dev = 0, n = 0;
        if ((err = cudaGetDevice(&dev)) != cudaSuccess ||
            (err = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
            return err;
        sms = n;
    }
    int64_t grid = std::min<int64_t>(p.nb, sms);
    k_flash_res<T><<<(unsigned)grid, RES_WARPS * 32, ns * resident_slot(p), s>>>(
        p, (const T *)q, (const T *)k, (const T *)v, (T *)y, (int)((p.s + 15) / 16 * 16), ns);
    return cudaGetLastError();
}

// Hopper's wgmma kernel (cuda/attention_sm90.cu) where it runs: an sm_90 device, and not
// switched off (SI_ATTN90=0: the mma.sync kernels below, for A/B runs and their tests)
bool attn90_here() {
    static int here = -1;
    if (here < 0) {
        int dev = 0, major = 0, minor = 0;
        const char *env = getenv("SI_ATTN90");
        here =
            !(env && strcmp(env, "0") == 0) && cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
            major == 9 && minor == 0;
    }
    return here == 1;
}

// The head sizes (Q and K's, V's) the flash kernel is built for: the ViTs' 32, 64 and 128, ViT-H's
// 80, LeViT's 16 and 32 against V twice or four times as wide
#define SI_FLASH_HEADS(X)                                                                          \
    X(16, 16) X(16, 32) X(16, 64) X(32, 32) X(32, 64) X(64, 64) X(80, 80) X(128, 128)
__host__ __device__ constexpr bool flash_heads(int64_t d, int64_t dv) {
#define SI_FLASH_IS(DK, DV) (d == DK && dv == DV) ||
    return SI_FLASH_HEADS(SI_FLASH_IS) false;
#undef SI_FLASH_IS
}

// si_k_attention_kernel's choice for element type T (t its code)
template <typename T>
int which(int t, const si_k_attn &p, const void *q, const void *k, const void *v, const void *bias,
          const void *y) {
    if constexpr (sizeof(T) == 2) {
        // the tiled kernel alone normalises q and k, and applies an activation to Y
        const bool plain = !(p.qk_eps > 0.f) && !p.act.kind;
        if (plain && attn90_here() && si_cuda_attn90_ok(t, &p, q, k, v, bias, y))
            return SI_ATTN_WGMMA;
        if (flash_heads(p.d, p.dv) && flash_fits<T>(p, q, k, v, y)) {
            cudaError_t err = cudaSuccess;
            if (plain && p.d == 64 && !bias && resident_slots<T>(p, &err) >= 2)
                return SI_ATTN_RESIDENT;
            return SI_ATTN_FLASH;
        }
    }
    return SI_ATTN_ROWS;
}

template <typename T>
cudaError_t launch(cudaStream_t s, int t, const si_k_attn &p, const void *q, const void *k,
                   const void *v, const void *bias, void *y) {
    if constexpr (sizeof(T) == 2) {
        switch (which<T>(t, p, q, k, v, bias, y)) {
        case SI_ATTN_WGMMA: return si_cuda_attn90_run(s, t, &p, q, k, v, bias, y);
        case SI_ATTN_RESIDENT: return launch_resident<T>(s, p, q, k, v, y);
        case SI_ATTN_FLASH:
#define SI_FLASH_CASE(DK, DV)                                                                      \
    if (p.d == DK && p.dv == DV) return launch_flash<T, DK, DV>(s, p, q, k, v, bias, y);
            SI_FLASH_HEADS(SI_FLASH_CASE)
#undef SI_FLASH_CASE
            break;
        default: break;
        }
    }
    size_t smem = sizeof(float) * (size_t)(p.d + p.s + 32);
    k_attn_rows<T><<<(unsigned)(p.nb * p.t), 128, smem, s>>>(p, (const T *)q, (const T *)k,
                                                             (const T *)v, (const T *)bias, (T *)y);
    return cudaGetLastError();
}

} // namespace

bool si_k_attention_fits(int64_t d, int64_t s) {
    return sizeof(float) * (size_t)(d + s + 32) <= 48 * 1024;
}

int si_k_attention_kernel(int t, const si_k_attn *p, const void *q, const void *k, const void *v,
                          const void *bias, const void *y) {
    switch (t) {
    case SI_GT_F16: return which<__half>(t, *p, q, k, v, bias, y);
    case SI_GT_BF16: return which<__nv_bfloat16>(t, *p, q, k, v, bias, y);
    default: return which<float>(t, *p, q, k, v, bias, y);
    }
}

const char *si_k_attention_rows_why(int t, const si_k_attn *p, const void *q, const void *k,
                                    const void *v, const void *y, char *buf, size_t cap) {
    if (t == SI_GT_F32) return "FP32 (the fused kernels take FP16 and BF16)";
    if (!flash_heads(p->d, p->dv)) {
        snprintf(buf, cap,
                 "head size %lld, V's %lld (the fused kernels take 16, 32, 64, 80 and 128 with V "
                 "as wide, and 16 or 32 with V 2 or 4 times as wide)",
                 (long long)p->d, (long long)p->dv);
        return buf;
    }
    const void *ptrs[4] = {q, k, v, y};
    static const char *names[4] = {"Q", "K", "V", "Y"};
    size_t es = si_gtype_size(t);
    for (int i = 0; i < 4; i++)
        if (!si_attn_aligned(p, i, ptrs[i], es, i < 3 ? 16 : 2 * es)) {
            snprintf(buf, cap,
                     "%s%s's rows or matrices do not start on 16 bytes (rows of %lld elements)",
                     names[i], i == 1 && !p->trans_b ? " (given transposed)" : "",
                     (long long)p->ld[i]);
            return buf;
        }
    return "offsets past 32 bits (a batch too large for the fused kernels' indexing)";
}

const char *si_k_attention_kernel_name(int kernel) {
    switch (kernel) {
    case SI_ATTN_WGMMA: return "wgmma";
    case SI_ATTN_RESIDENT: return "resident mma.sync";
    case SI_ATTN_FLASH: return "tiled mma.sync";
    default: return "row-by-row";
    }
}

cudaError_t si_k_attention(cudaStream_t s, int t, const si_k_attn *p, const void *q, const void *k,
                           const void *v, const void *bias, void *y) {
    if (p->nb <= 0 || p->t <= 0 || p->dv <= 0) return cudaSuccess;
    switch (t) {
    case SI_GT_F16: return launch<__half>(s, t, *p, q, k, v, bias, y);
    case SI_GT_BF16: return launch<__nv_bfloat16>(s, t, *p, q, k, v, bias, y);
    default: return launch<float>(s, t, *p, q, k, v, bias, y);
    }
}
