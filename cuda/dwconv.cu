// The depthwise convolution of cuda/dwconv.cuh. Memory-bound (a few FMAs per byte), so the design
// is about bytes and then instructions: a block stages one input tile of an image (the halo
// included) for a slice of channels in shared memory, converting it to float and applying the
// prologue once per element as it loads it, then each thread computes TW neighbouring outputs
// along W for one vector of channels (8 halves or 4 floats: 16-byte global accesses, when C
// allows), reusing every column it reads across the TW outputs in registers. The weights are
// float (kh, kw, C), so a thread reads its taps as vectors and converts nothing.
#include "cuda/act.cuh"
#include "cuda/dwconv.cuh"
#include "cuda/kernels.cuh"

#include <stdint.h>
#include <string.h>

namespace {

__device__ __forceinline__ float to_f(float v) {
    return v;
}
__device__ __forceinline__ float to_f(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ float to_f(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) {
    return v;
}
template <> __device__ __forceinline__ __half from_f<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// V channels moved as one access of V * sizeof(T) bytes (16 on the vector path), so the
// pointer must be aligned to that: the launcher checks it
template <typename T, int V> struct alignas(V * sizeof(T)) vec { T e[V]; };

template <typename T, int V>
__device__ __forceinline__ void to_f(const vec<T, V> &v, float (&f)[V]) {
#pragma unroll
    for (int i = 0; i < V; i++) f[i] = to_f(v.e[i]);
}

template <typename T, int V> __device__ __forceinline__ vec<T, V> from_f(const float (&f)[V]) {
    vec<T, V> v;
#pragma unroll
    for (int i = 0; i < V; i++) v.e[i] = from_f<T>(f[i]);
    return v;
}

// one access for the whole vector: copy it whole first (converting through a reference to
// memory makes the compiler load element by element)
template <typename T, int V> __device__ __forceinline__ void load_f(const T *p, float (&f)[V]) {
    const vec<T, V> v = *reinterpret_cast<const vec<T, V> *>(p);
    to_f(v, f);
}

// act_apply on V values with the switch on the kind taken once, outside the loop: inside each
// case the kind is a constant, so act_apply's own switch folds away (one formula, no copy of it)
template <int V> __device__ __forceinline__ void act_vec(float (&f)[V], const si_act &a) {
#define SI_ACT_CASE(K)                                                                             \
    case K: {                                                                                      \
        si_act k = a;                                                                              \
        k.kind = K;                                                                                \
        _Pragma("unroll") for (int i = 0; i < V; i++) f[i] = act_apply(f[i], k);                   \
        return;                                                                                    \
    }
    switch (a.kind) {
    case SI_ACT_NONE:
        return;
        SI_ACT_CASE(SI_ACT_RELU)
        SI_ACT_CASE(SI_ACT_CLIP)
        SI_ACT_CASE(SI_ACT_SIGMOID)
        SI_ACT_CASE(SI_ACT_HARDSIGMOID)
        SI_ACT_CASE(SI_ACT_HARDSWISH)
        SI_ACT_CASE(SI_ACT_SILU)
        SI_ACT_CASE(SI_ACT_LEAKYRELU)
    default:
#pragma unroll
        for (int i = 0; i < V; i++) f[i] = act_apply(f[i], a);
    }
#undef SI_ACT_CASE
}

// The tile in shared memory is float, converted (and the prologue applied) once per element as
// it is staged. A pixel's V channels are V/4 float4 chunks kept in V/4 planes (one float when
// V == 1), so each 16-byte access of neighbouring threads is one the bank analysis sees.
template <int V> struct tile_chunk { typedef float4 type; };
template <> struct tile_chunk<1> { typedef float type; };

template <int V>
__device__ __forceinline__ void tile_st(float *tile, int plane, int pos, const float (&f)[V]) {
    if (V == 1) {
        tile[pos] = f[0];
    } else {
        float4 *t = reinterpret_cast<float4 *>(tile);
#pragma unroll
        for (int q = 0; q < V / 4; q++)
            t[q * plane + pos] = make_float4(f[4 * q], f[4 * q + 1], f[4 * q + 2], f[4 * q + 3]);
    }
}

template <int V>
__device__ __forceinline__ void tile_ld(const float *tile, int plane, int pos, float (&f)[V]) {
    if (V == 1) {
        f[0] = tile[pos];
    } else {
        const float4 *t = reinterpret_cast<const float4 *>(tile);
#pragma unroll
        for (int q = 0; q < V / 4; q++) {
            float4 a = t[q * plane + pos];
            f[4 * q] = a.x, f[4 * q + 1] = a.y, f[4 * q + 2] = a.z, f[4 * q + 3] = a.w;
        }
    }
}

struct dw_params {
    const void *x, *b, *z, *pb;
    const float *w; // (kh, kw, c) float
    void *y;
    int h, w_, c, oh, ow, kh, kw, sh, sw, pt, pl;
    si_act act, pact;
    int pro;         // apply the prologue
    int cvb, cvb_lg; // channel vectors per block (a power of 2) and its log2
    int twy, twx;    // workers per block: output rows, and column groups of TW outputs
    int ih, iw, rp;  // the input tile: rows, columns, row pitch in chunks (one plane)
    int plane;       // chunks per plane: ih * rp
    int dy, dx;      // a thread's step through the tile's pixels, as (rows, columns)
    int tiles_x;     // tile columns per image
};

// Template: T element type, V channels per thread, KW and SW the kernel's width and stride along
// W when known at compile time (0: read from p, with TW == 1), TW outputs per thread along W.
// The grid: x = tile (row-major over the image), y = image, z = channel slice of cvb * V.
// Three blocks per SM at most 80 registers: the phases (stage, compute) of one block hide the
// latency of the others', which measured faster than two blocks with more registers.
template <typename T, int V, int KW, int SW, int TW>
__global__ void __launch_bounds__(256, 3) k_dwconv(const dw_params p) {
    extern __shared__ float4 smem[];
    float *tile = reinterpret_cast<float *>(smem);
    const int kw = KW ? KW : p.kw, sw = SW ? SW : p.sw;
    const int tile_y = blockIdx.x / p.tiles_x, tile_x = blockIdx.x - tile_y * p.tiles_x;
    const int img = blockIdx.y;
    const int cl = threadIdx.x & (p.cvb - 1), wk = threadIdx.x >> p.cvb_lg;
    const int nwk = blockDim.x >> p.cvb_lg;
    const int c0 = (blockIdx.z * p.cvb + cl) * V; // this thread's first channel
    const bool c_ok = c0 < p.c;                   // V divides c on the vector path
    const int oy0 = tile_y * p.twy, ox0 = tile_x * p.twx * TW;
    const int iy0 = oy0 * p.sh - p.pt, ix0 = ox0 * sw - p.pl;

    // 1. the tile: ih x iw pixels of cvb vectors; padding and channels past c are zeros
    {
        const T *x = (const T *)p.x + (int64_t)img * p.h * p.w_ * p.c + c0;
        float pb[V];
#pragma unroll
        for (int i = 0; i < V; i++) pb[i] = 0.f;
        if (p.pro && p.pb && c_ok) load_f<T, V>((const T *)p.pb + c0, pb);
        const int items = p.ih * p.iw;
        int ty = wk / p.iw, tx = wk - ty * p.iw; // this thread's pixel, stepped by nwk
        constexpr int U = 4;                     // loads in flight per thread before the stores
        for (int q0 = wk; q0 < items; q0 += U * nwk) {
            vec<T, V> v[U];
            bool in[U];
            int pos[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int gy = iy0 + ty, gx = ix0 + tx;
                in[u] = c_ok && ty < p.ih && gy >= 0 && gy < p.h && gx >= 0 && gx < p.w_;
                pos[u] = ty * p.rp + tx * p.cvb + cl;
                if (in[u]) v[u] = *reinterpret_cast<const vec<T, V> *>(x + (gy * p.w_ + gx) * p.c);
                tx += p.dx;
                ty += p.dy;
                if (tx >= p.iw) tx -= p.iw, ty++;
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (q0 + u * nwk >= items) break;
                float f[V];
                if (in[u]) {
                    to_f(v[u], f);
                    if (p.pro) {
#pragma unroll
                        for (int i = 0; i < V; i++) f[i] += pb[i];
                        act_vec(f, p.pact);
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < V; i++) f[i] = 0.f;
                }
                tile_st(tile, p.plane, pos[u], f);
            }
        }
    }
    __syncthreads();

    // 2. TW outputs along W per thread: worker wk is row gy, column group gx of the tile (rows
    // vary fastest between neighbouring workers: the row pitch then spreads them over banks)
    const int gy = wk % p.twy, gx = wk / p.twy;
    const int oy = oy0 + gy, ox = ox0 + gx * TW;
    if (!c_ok || oy >= p.oh || ox >= p.ow) return;
    float acc[TW][V];
#pragma unroll
    for (int t = 0; t < TW; t++)
#pragma unroll
        for (int i = 0; i < V; i++) acc[t][i] = 0.f;
    const float *wc = p.w + c0; // (kh, kw, c)
    for (int r = 0; r < p.kh; r++) {
        const int row = (gy * p.sh + r) * p.rp + gx * TW * sw * p.cvb + cl;
        if (KW) {
            float wr[KW ? KW : 1][V];
#pragma unroll
            for (int s = 0; s < KW; s++) load_f<float, V>(wc + (r * KW + s) * p.c, wr[s]);
#pragma unroll
            for (int j = 0; j < (TW - 1) * SW + KW; j++) { // input column j: tap j - t*SW of t
                float f[V];
                tile_ld(tile, p.plane, row + j * p.cvb, f);
#pragma unroll
                for (int t = 0; t < TW; t++) {
                    const int s = j - t * SW;
                    if (s < 0 || s >= KW) continue;
#pragma unroll
                    for (int i = 0; i < V; i++) acc[t][i] = fmaf(f[i], wr[s][i], acc[t][i]);
                }
            }
        } else { // any width and stride: one output per thread
            for (int s = 0; s < kw; s++) {
                float f[V], wv[V];
                tile_ld(tile, p.plane, row + s * p.cvb, f);
                load_f<float, V>(wc + (r * kw + s) * p.c, wv);
#pragma unroll
                for (int i = 0; i < V; i++) acc[0][i] = fmaf(f[i], wv[i], acc[0][i]);
            }
        }
    }

    // 3. the epilogue, the CPU's order: (conv + bias) + residual, then the activation
    float b[V];
#pragma unroll
    for (int i = 0; i < V; i++) b[i] = 0.f;
    if (p.b) load_f<T, V>((const T *)p.b + c0, b);
    const int64_t o0 = (((int64_t)img * p.oh + oy) * p.ow + ox) * p.c + c0;
    T *y = (T *)p.y + o0;
    const T *z = p.z ? (const T *)p.z + o0 : NULL;
#pragma unroll
    for (int t = 0; t < TW; t++) {
        if (ox + t >= p.ow) break;
        float o[V];
#pragma unroll
        for (int i = 0; i < V; i++) o[i] = acc[t][i] + b[i];
        if (z) {
            float zf[V];
            load_f<T, V>(z + t * p.c, zf);
#pragma unroll
            for (int i = 0; i < V; i++) o[i] += zf[i];
        }
        act_vec(o, p.act);
        *reinterpret_cast<vec<T, V> *>(y + t * p.c) = from_f<T, V>(o);
    }
}

constexpr size_t smem_cap = 48 << 10; // the default limit: no opt-in attribute needed

// The largest number of distinct 4-byte words one bank serves in the first phase (the threads
// one shared-memory access cycle serves) of phase 2's tile reads, for row pitch rp in chunks of
// cb bytes: 1 is conflict-free.
static int bank_ways(const dw_params &p, int tw, int cb, int rp) {
    int per_phase = cb >= 16 ? 8 : 32, nthreads = p.twy * p.twx * p.cvb;
    long words[32][8];
    int nw[32] = {0}, worst = 1;
    for (int k = 0; k < per_phase && k < nthreads; k++) {
        int cl = k % p.cvb, wk = k / p.cvb, gy = wk % p.twy, gx = wk / p.twy;
        long byte = ((long)gy * p.sh * rp + (long)gx * tw * p.sw * p.cvb + cl) * cb;
        for (long wd = byte / 4; wd * 4 < byte + cb; wd++) {
            int bank = (int)(wd % 32), seen = 0;
            for (int i = 0; i < nw[bank]; i++) seen |= words[bank][i] == wd;
            if (!seen && nw[bank] < 8) words[bank][nw[bank]++] = wd;
            if (nw[bank] > worst) worst = nw[bank];
        }
    }
    return worst;
}

// Block shape for the shape in p (c, oh, ow, kh, kw, sh, sw set): channel vectors per block,
// workers, the tile and its row pitch. False when no tile fits shared memory.
static bool plan_tile(dw_params *p, int v, int tw) {
    int cv = (p->c + v - 1) / v;
    // the widest slice (up to 4 vectors, 32 scalars) that wastes at most an eighth of the
    // threads on channels past c; wider ones (8 vectors) measured slower on the H100: fewer
    // workers, so smaller tiles and more halo per output
    p->cvb = 1;
    for (int b = v > 1 ? 4 : 32; b > 1; b /= 2)
        if (((cv + b - 1) / b * b - cv) * 8 <= cv) {
            p->cvb = b;
            break;
        }
    p->cvb_lg = 0;
    while ((1 << p->cvb_lg) < p->cvb) p->cvb_lg++;
    int workers = 256 / p->cvb, cols = (p->ow + tw - 1) / tw;
    p->twx = cols < 4 ? cols : 4;
    p->twy = workers / p->twx < p->oh ? workers / p->twx : p->oh;
    const int cb = v > 1 ? 16 : 4, planes = v > 1 ? v / 4 : 1;
    for (;;) {
        p->ih = (p->twy - 1) * p->sh + p->kh;
        p->iw = (p->twx * tw - 1) * p->sw + p->kw;
        // pad the row pitch so that neighbouring workers' reads fall on distinct banks
        int best = 0, best_ways = 1 << 30;
        for (int pad = 0; pad < 128 / cb; pad++) {
            int ways = bank_ways(*p, tw, cb, p->iw * p->cvb + pad);
            if (ways < best_ways) best_ways = ways, best = pad;
        }
        p->rp = p->iw * p->cvb + best;
        p->plane = p->ih * p->rp;
        if ((size_t)planes * p->plane * cb <= smem_cap) break;
        if (p->twy > 1)
            p->twy = (p->twy + 1) / 2;
        else if (p->twx > 1)
            p->twx--;
        else
            return false;
    }
    int nwk = p->twy * p->twx;
    p->dy = nwk / p->iw;
    p->dx = nwk % p->iw;
    p->tiles_x = (p->ow + p->twx * tw - 1) / (p->twx * tw);
    return true;
}

template <typename T, int V, int KW, int SW, int TW>
static cudaError_t launch(cudaStream_t st, dw_params p, int n) {
    if (!plan_tile(&p, V, TW)) return cudaErrorInvalidConfiguration;
    int64_t tiles = (int64_t)p.tiles_x * ((p.oh + p.twy - 1) / p.twy);
    int slices = (p.c / V + p.cvb - 1) / p.cvb;
    if (tiles > INT32_MAX || n > 65535 || slices > 65535) return cudaErrorInvalidConfiguration;
    dim3 grid((unsigned)tiles, (unsigned)n, (unsigned)slices), block(p.twy * p.twx * p.cvb);
    size_t smem = (size_t)p.plane * V * sizeof(float);
    k_dwconv<T, V, KW, SW, TW><<<grid, block, smem, st>>>(p);
    return cudaGetLastError();
}

// The specialised widths and strides (every depthwise conv of MobileNet and EfficientNet): TW
// outputs per thread keep the loaded columns' reuse high while the accumulators and a row of
// weights stay in registers (4 for 3-wide at stride 1; 2 where the row of weights or the stride
// is larger, as measured best per layer on the H100). Anything else takes the generic
// one-output kernel.
template <typename T, int V> static cudaError_t dispatch(cudaStream_t st, dw_params p, int n) {
    if (p.sw == 1) {
        if (p.kw == 3) return launch<T, V, 3, 1, 4>(st, p, n);
        if (p.kw == 5) return launch<T, V, 5, 1, 2>(st, p, n);
        if (p.kw == 7) return launch<T, V, 7, 1, 2>(st, p, n);
    } else if (p.sw == 2) {
        if (p.kw == 3) return launch<T, V, 3, 2, 2>(st, p, n);
        if (p.kw == 5) return launch<T, V, 5, 2, 2>(st, p, n);
        if (p.kw == 7) return launch<T, V, 7, 2, 2>(st, p, n);
    }
    return launch<T, V, 0, 0, 1>(st, p, n);
}

template <typename T>
static cudaError_t run(cudaStream_t st, const si_dwconv_args *a, dw_params p) {
    constexpr int V = 16 / sizeof(T) < 8 ? 16 / sizeof(T) : 8;
    const void *ptrs[] = {a->x, a->b, a->z, a->pb, a->y};
    bool aligned = (uintptr_t)a->w % (V * sizeof(float)) == 0; // the float weights' vectors
    for (const void *q : ptrs) aligned = aligned && (uintptr_t)q % 16 == 0; // NULL is aligned
    if (p.c % V == 0 && aligned) return dispatch<T, V>(st, p, a->s.n);
    return dispatch<T, 1>(st, p, a->s.n);
}

} // namespace

bool si_dwconv_supported(const si_conv_shape *s) {
    return s->group > 1 && s->group == s->c && s->m == s->c && s->dh == 1 && s->dw == 1 &&
           s->kh >= 1 && s->kw >= 1 && s->kh <= SI_DWCONV_MAX_K && s->kw <= SI_DWCONV_MAX_K &&
           s->sh >= 1 && s->sw >= 1 && s->sh <= 4 && s->sw <= 4 && s->pt >= 0 && s->pl >= 0 &&
           s->pb >= 0 && s->pr >= 0 && s->n >= 1 && s->h >= 1 && s->w >= 1 && s->oh >= 1 &&
           s->ow >= 1 && (int64_t)s->h * s->w * s->c < INT32_MAX &&
           (int64_t)s->oh * s->ow * s->c < INT32_MAX;
}

cudaError_t si_k_dwconv(cudaStream_t st, int t, const si_dwconv_args *a) {
    const si_conv_shape *s = &a->s;
    if (!si_dwconv_supported(s)) return cudaErrorInvalidValue;
    dw_params p;
    memset(&p, 0, sizeof p);
    p.x = a->x;
    p.w = a->w;
    p.b = a->b;
    p.z = a->z;
    p.pb = a->pb;
    p.y = a->y;
    p.h = s->h;
    p.w_ = s->w;
    p.c = s->c;
    p.oh = s->oh;
    p.ow = s->ow;
    p.kh = s->kh;
    p.kw = s->kw;
    p.sh = s->sh;
    p.sw = s->sw;
    p.pt = s->pt;
    p.pl = s->pl;
    p.act = a->act;
    p.pact = a->pact;
    p.pro = a->pb != NULL || a->pact.kind != SI_ACT_NONE;
    if (t == SI_GT_F16) return run<__half>(st, a, p);
    if (t == SI_GT_BF16) return run<__nv_bfloat16>(st, a, p);
    return run<float>(st, a, p);
}
