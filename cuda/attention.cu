// Fused attention, Y = softmax(scale * Q K^T + bias) V per matrix, without writing the T x S
// scores to global memory. FP16/BF16 with head size 32, 64 or 128 (Dv == D): a flash-attention
// kernel on the tensor cores (mma.sync m16n8k16, FP32 accumulation, the online softmax of
// FlashAttention-2: each warp owns 16 query rows, K and V tiles of 64 keys stream through shared
// memory). Otherwise (FP32, other head sizes): one block per query row, the row's scores in
// shared memory. The CPU twin is si_cpu_attention (src/cpu/kernels.c).
#include <math.h>

#include "cuda/attention.cuh"
#include "cuda/elem.cuh"

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
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ inline void mma<__nv_bfloat16>(float c[4], const uint32_t a[4], uint32_t b0,
                                          uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// four 8x8 b16 matrices from shared memory (lanes 8i..8i+7 give matrix i's row addresses): the
// mma B fragments of two n-tiles at once; .trans for V, whose rows are keys
__device__ inline void ldsm_x4(uint32_t r[4], const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ inline void ldsm_x4_t(uint32_t r[4], const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// 2^x in one MUFU instruction; results below 2^-126 flush to 0 (a probability that small is 0)
__device__ inline float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// matrix b's offset in an operand whose batch dims have strides st: b decoded over the batch
// dims; the bias's index on each dim modulo its own extent (bmod)
__device__ inline int64_t batch_off(const si_k_attn &p, int64_t b, const int64_t *st,
                                    const int64_t *mod = nullptr) {
    int64_t off = 0;
    for (int d = p.nbd - 1; d >= 0; d--) {
        int64_t i = b % p.bdims[d];
        off += (mod ? i % mod[d] : i) * st[d];
        b /= p.bdims[d];
    }
    return off;
}

// one 16-byte chunk global -> shared without the registers (cp.async); zeros when !valid
__device__ inline void cp16(void *sm, const void *g, bool valid) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(sm);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(a), "l"(g),
                 "r"(valid ? 16 : 0));
}
__device__ inline void cp_commit() {
    asm volatile("cp.async.commit_group;");
}
template <int N> __device__ inline void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
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

// blockDim.x / 32 warps (at most 8), 16 query rows each; K and V tiles double-buffered: tile
// i+1 loads while i computes. Scores are kept in the log2 domain (exp2). Key groups wholly
// beyond S (the last tile's padding) are skipped.
template <typename T, int D>
__global__ void __launch_bounds__(256, D <= 64 ? 2 : 1)
    k_flash(si_k_attn p, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
            const T *__restrict__ bias, T *__restrict__ y, int row_blocks) {
    constexpr int TILE = BN * (D + PAD);
    const int M = blockDim.x / 2; // 16 rows per warp
    extern __shared__ __align__(16) unsigned char smem[];
    T *qs = reinterpret_cast<T *>(smem), *kv = qs + M * (D + PAD); // kv: [2][K tile, V tile]
    // a matrix's row blocks side by side (they share K and V in L2), matrices after each other
    const int64_t b = blockIdx.x / row_blocks;
    const int T_ = (int)p.t, S = (int)p.s, q0 = (int)(blockIdx.x % row_blocks) * M;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const int mat = lane / 8, mr = lane % 8; // this lane's row address in ldmatrix
    const T *kb = k + batch_off(p, b, p.ost[1]), *vb = v + batch_off(p, b, p.ost[2]);
    const int tiles = (S + BN - 1) / BN, ldk = (int)p.ld[1], ldv = (int)p.ld[2];
    auto load_tile = [&](int i) {
        T *kt = kv + (i & 1) * 2 * TILE, *vt = kt + TILE;
        if (p.trans_b)
            load_rows<T, D>(kt, kb, ldk, i * BN, S, BN);
        else
            load_kt<T, D>(kt, kb, ldk, i * BN, S);
        load_rows<T, D>(vt, vb, ldv, i * BN, S, BN);
    };
    load_rows<T, D>(qs, q + batch_off(p, b, p.ost[0]), (int)p.ld[0], q0, T_, M);
    load_tile(0);
    cp_commit();
    uint32_t qa[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const int r0 = warp * 16;
    const int row[2] = {q0 + r0 + g, q0 + r0 + g + 8};
    const int64_t boff = bias ? batch_off(p, b, p.bst, p.bmod) : 0;
    const float LOG2E = 1.4426950408889634f, sl2 = p.scale * LOG2E;
    for (int it = 0; it < tiles; it++) {
        if (it + 1 < tiles) load_tile(it + 1);
        cp_commit();
        cp_wait<1>(); // tile it (and Q) landed
        __syncthreads();
        if (it == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const T *r_lo = qs + (r0 + g) * (D + PAD) + kk * 16 + 2 * t4;
                const T *r_hi = r_lo + 8 * (D + PAD);
                qa[kk][0] = *reinterpret_cast<const uint32_t *>(r_lo);
                qa[kk][1] = *reinterpret_cast<const uint32_t *>(r_hi);
                qa[kk][2] = *reinterpret_cast<const uint32_t *>(r_lo + 8);
                qa[kk][3] = *reinterpret_cast<const uint32_t *>(r_hi + 8);
            }
        }
        const T *ks = kv + (it & 1) * 2 * TILE, *vs = ks + TILE;
        const int s0 = it * BN, live = min(BN, S - s0); // keys of this tile inside S
        float sc[BN / 8][4];
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt += 2) {
            if (nt * 8 >= live) continue; // the whole pair of key groups is padding
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) { // K rows are keys: B[dim][key] untransposed
                uint32_t r[4];
                ldsm_x4(r, ks + ((nt + (mat >> 1)) * 8 + mr) * (D + PAD) + kk * 16 + (mat & 1) * 8);
                mma<T>(sc[nt], qa[kk], r[0], r[1]);
                mma<T>(sc[nt + 1], qa[kk], r[2], r[3]);
            }
        }
        // scores in the log2 domain are sc * k2 (k2 = 1 once scaled here); the exponent below is
        // one FFMA, sc * k2 - max
        float mx[2] = {-INFINITY, -INFINITY}, k2 = 1.f;
        if (!bias && live == BN && sl2 > 0.f) { // a whole tile of keys: nothing to mask or add
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) mx[i >> 1] = fmaxf(mx[i >> 1], sc[nt][i]);
            mx[0] *= sl2;
            mx[1] *= sl2;
            k2 = sl2;
        } else {
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int c = nt * 8 + 2 * t4 + (i & 1), r = row[i >> 1]; // key in tile, query row
                    float x = sc[nt][i] * sl2;
                    if (bias && r < T_ && c < live)
                        x += si_to_f(bias[boff + r * p.bst_t + (int64_t)(s0 + c) * p.bst_s]) * LOG2E;
                    sc[nt][i] = c < live ? x : -INFINITY;
                    mx[i >> 1] = fmaxf(mx[i >> 1], sc[nt][i]);
                }
        }
        float corr[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 2));
            float mn = fmaxf(m[h], mx[h]);
            float use = mn == -INFINITY ? 0.f : mn;
            corr[h] = ex2(m[h] - use);
            m[h] = mn;
            mx[h] = use;
            l[h] *= corr[h];
        }
#pragma unroll
        for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                sc[nt][i] = ex2(fmaf(sc[nt][i], k2, -mx[i >> 1]));
                l[i >> 1] += sc[nt][i];
            }
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            o[i][0] *= corr[0];
            o[i][1] *= corr[0];
            o[i][2] *= corr[1];
            o[i][3] *= corr[1];
        }
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            if (kk * 16 >= live) continue; // P is zero there
            uint32_t a[4] = {pack2<T>(sc[2 * kk][0], sc[2 * kk][1]),
                             pack2<T>(sc[2 * kk][2], sc[2 * kk][3]),
                             pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                             pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
            for (int nt = 0; nt < D / 8; nt += 2) { // V rows are keys: B[key][dim] transposed
                uint32_t r[4];
                ldsm_x4_t(r,
                          vs + (kk * 16 + (mat & 1) * 8 + mr) * (D + PAD) + (nt + (mat >> 1)) * 8);
                mma<T>(o[nt], a, r[0], r[1]);
                mma<T>(o[nt + 1], a, r[2], r[3]);
            }
        }
        __syncthreads(); // every warp is done with this buffer before it is loaded again
    }
    cp_wait<0>(); // nothing in flight at exit (S == 0 issued Q and never waited)
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffff, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffff, l[h], 2);
        l[h] = l[h] > 0.f ? 1.f / l[h] : 0.f;
    }
    T *yb = y + batch_off(p, b, p.ost[3]);
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (row[h] >= T_) continue;
            uint32_t w = pack2<T>(o[nt][2 * h] * l[h], o[nt][2 * h + 1] * l[h]);
            *reinterpret_cast<uint32_t *>(yb + (int64_t)row[h] * p.ld[3] + nt * 8 + 2 * t4) = w;
        }
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
    const T *qr = q + batch_off(p, b, p.ost[0]) + r * p.ld[0];
    const T *kb = k + batch_off(p, b, p.ost[1]), *vb = v + batch_off(p, b, p.ost[2]);
    const int64_t lk = p.ld[1], lv = p.ld[2];
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) qs[d] = si_to_f(qr[d]);
    __syncthreads();
    const int64_t boff = bias ? batch_off(p, b, p.bst, p.bmod) + r * p.bst_t : 0;
    float mx = -INFINITY;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
        float acc = 0.f;
        for (int64_t d = 0; d < D; d++)
            acc += qs[d] * si_to_f(p.trans_b ? kb[s * lk + d] : kb[d * lk + s]);
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
    T *yr = y + batch_off(p, b, p.ost[3]) + r * p.ld[3];
    for (int64_t d = threadIdx.x; d < Dv; d += blockDim.x) {
        float acc = 0.f;
        for (int64_t s = 0; s < S; s++) acc += sc[s] * si_to_f(vb[s * lv + d]);
        yr[d] = si_from_f<T>(acc * inv);
    }
}

// Warps per block: 16 query rows each, at most 8; the row tiles of a matrix spread evenly over
// its blocks, so a 197-token ViT runs 2 blocks of 7 warps (224 rows) rather than 2 of 8 (256),
// and Swin's 49-token windows one block of 4
// Warps per block: 16 query rows each, at most 8; the row tiles of a matrix spread evenly over
// its blocks, so a 197-token ViT runs 2 blocks of 7 warps (224 rows) rather than 2 of 8 (256),
// and Swin's 49-token windows one block of 4. At most 128 registers a thread, so two blocks share
// an SM for head sizes up to 64 (measured on the H100: 6% faster on ViT-B, 9% on DeiT-S than
// one block of 146); head size 128 keeps one block, as two would spill its accumulators.
template <typename T, int D>
cudaError_t launch_flash(cudaStream_t s, const si_k_attn &p, const void *q, const void *k,
                         const void *v, const void *bias, void *y) {
    constexpr int WMAX = 8;
    int64_t row_tiles = (p.t + 15) / 16, blocks = (row_tiles + WMAX - 1) / WMAX;
    int w = (int)((row_tiles + blocks - 1) / blocks);
    size_t smem = sizeof(T) * (size_t)(16 * w + 4 * BN) * (D + PAD);
    static bool attr = false;
    if (!attr) {
        size_t most = sizeof(T) * (size_t)(16 * WMAX + 4 * BN) * (D + PAD);
        cudaError_t e = cudaFuncSetAttribute(
            k_flash<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most);
        if (e != cudaSuccess) return e;
        attr = true;
    }
    k_flash<T, D><<<(unsigned)(p.nb * blocks), w * 32, smem, s>>>(
        p, (const T *)q, (const T *)k, (const T *)v, (const T *)bias, (T *)y, (int)blocks);
    return cudaGetLastError();
}

// cp.async moves 16-byte chunks: every row and matrix of Q, K and V starts on 16 bytes; Y is
// stored two elements at a time; a matrix's rows are addressed with 32-bit offsets
template <typename T>
bool flash_fits(const si_k_attn &p, const void *q, const void *k, const void *v, void *y) {
    const void *ptrs[4] = {q, k, v, y};
    for (int i = 0; i < 4; i++) {
        if ((p.t + p.s + 128) * (p.ld[i] + 8) >= INT32_MAX) return false;
        size_t unit = i < 3 ? 16 : 2 * sizeof(T);
        if ((uintptr_t)ptrs[i] % unit || (p.ld[i] * sizeof(T)) % unit) return false;
        for (int d = 0; d < p.nbd; d++)
            if ((p.ost[i][d] * sizeof(T)) % unit) return false;
    }
    return true;
}

template <typename T>
cudaError_t launch(cudaStream_t s, const si_k_attn &p, const void *q, const void *k, const void *v,
                   const void *bias, void *y) {
    if constexpr (sizeof(T) == 2) {
        if (p.dv == p.d && flash_fits<T>(p, q, k, v, y)) {
            if (p.d == 64) return launch_flash<T, 64>(s, p, q, k, v, bias, y);
            if (p.d == 32) return launch_flash<T, 32>(s, p, q, k, v, bias, y);
            if (p.d == 128) return launch_flash<T, 128>(s, p, q, k, v, bias, y);
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

cudaError_t si_k_attention(cudaStream_t s, int t, const si_k_attn *p, const void *q, const void *k,
                           const void *v, const void *bias, void *y) {
    if (p->nb <= 0 || p->t <= 0 || p->dv <= 0) return cudaSuccess;
    switch (t) {
    case SI_GT_F16: return launch<__half>(s, *p, q, k, v, bias, y);
    case SI_GT_BF16: return launch<__nv_bfloat16>(s, *p, q, k, v, bias, y);
    default: return launch<float>(s, *p, q, k, v, bias, y);
    }
}
