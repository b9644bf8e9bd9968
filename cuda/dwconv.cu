// The depthwise convolution of cuda/dwconv.cuh. Memory-bound (a few FMAs per byte), so the design
// is about bytes and then instructions: a block stages one input tile of an image (the halo
// included) for a slice of channels in shared memory, converting it to float and applying the
// prologue once per element as it loads it, then computes from the tile. Two kernels do that:
// k_dwconv2, register-blocked (a thread keeps a whole 3x3 or 5x5 kernel for two channels and
// computes a patch of outputs), for square 3x3 and 5x5 kernels at stride 1 or 2 with C a multiple
// of 8, and k_dwconv for every other shape: each thread computes TW neighbouring outputs along W
// for one vector of channels (8 halves or 4 floats: 16-byte global accesses, when C allows),
// reusing every column it reads across the TW outputs in registers. The weights are float
// (kh, kw, C), so a thread reads its taps as vectors and converts nothing.
#include "cuda/act.cuh"
#include "cuda/dwconv.cuh"
#include "cuda/elem.cuh"
#include "cuda/kernels.cuh"

#include <stdint.h>
#include <string.h>

#include <type_traits>

namespace {

// V channels moved as one access of V * sizeof(T) bytes (16 on the vector path), so the
// pointer must be aligned to that: the launcher checks it
template <typename T, int V> struct alignas(V * sizeof(T)) vec { T e[V]; };

template <typename T, int V>
__device__ __forceinline__ void to_f(const vec<T, V> &v, float (&f)[V]) {
#pragma unroll
    for (int i = 0; i < V; i++) f[i] = si_to_f(v.e[i]);
}

template <typename T, int V> __device__ __forceinline__ vec<T, V> from_f(const float (&f)[V]) {
    vec<T, V> v;
#pragma unroll
    for (int i = 0; i < V; i++) v.e[i] = si_from_f<T>(f[i]);
    return v;
}

// one access for the whole vector: copy it whole first (converting through a reference to
// memory makes the compiler load element by element)
template <typename T, int V> __device__ __forceinline__ void load_f(const T *p, float (&f)[V]) {
    const vec<T, V> v = *reinterpret_cast<const vec<T, V> *>(p);
    to_f(v, f);
}

// One staged chunk of N channels in float: the loaded values with the prologue (the previous
// conv's bias and activation) applied where p.pro says, or zeros outside the image. Both
// kernels' staging loops end here.
template <bool FAST, int N, typename T>
__device__ __forceinline__ void stage_chunk(const T (&e)[N], bool in, int pro, const float (&pb)[N],
                                            const si_act &pact, float (&f)[N]) {
    if (!in) {
#pragma unroll
        for (int i = 0; i < N; i++) f[i] = 0.f;
        return;
    }
#pragma unroll
    for (int i = 0; i < N; i++) f[i] = si_to_f(e[i]);
    if (pro) {
#pragma unroll
        for (int i = 0; i < N; i++) f[i] += pb[i];
        si_act_vec<FAST>(f, pact);
    }
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

// 1. the tile: ih x iw pixels of cvb vectors; padding and channels past c are zeros
template <typename T, int V>
__device__ __forceinline__ void dw_stage(const dw_params &p, float *tile, int img, int c0,
                                         bool c_ok, int cl, int wk, int nwk, int iy0, int ix0) {
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
            stage_chunk<sizeof(T) == 2>(v[u].e, in[u], p.pro, pb, p.pact, f);
            tile_st(tile, p.plane, pos[u], f);
        }
    }
}

// 2. TW outputs along W of worker (gy, gx) of the tile into acc
template <int V, int KW, int SW, int TW>
__device__ __forceinline__ void dw_compute(const dw_params &p, const float *tile, const float *wc,
                                           int gy, int gx, int cl, float (&acc)[TW][V]) {
    const int kw = KW ? KW : p.kw, sw = SW ? SW : p.sw;
#pragma unroll
    for (int t = 0; t < TW; t++)
#pragma unroll
        for (int i = 0; i < V; i++) acc[t][i] = 0.f;
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
}

// 3. the epilogue, the CPU's order: (conv + bias) + residual, then the activation
template <typename T, int V, int TW>
__device__ __forceinline__ void dw_epilogue(const dw_params &p, const float (&acc)[TW][V], int img,
                                            int oy, int ox, int c0) {
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
        si_act_vec<sizeof(T) == 2>(o, p.act);
        *reinterpret_cast<vec<T, V> *>(y + t * p.c) = from_f<T, V>(o);
    }
}

// Template: T element type, V channels per thread, KW and SW the kernel's width and stride along
// W when known at compile time (0: read from p, with TW == 1), TW outputs per thread along W.
// The grid: x = tile (row-major over the image), y = image, z = channel slice of cvb * V.
// Three blocks per SM at most 80 registers: the phases (stage, compute) of one block hide the
// latency of the others', which measured faster than two blocks with more registers.
template <typename T, int V, int KW, int SW, int TW, int MINB = 3>
__global__ void __launch_bounds__(256, MINB) k_dwconv(const dw_params p) {
    extern __shared__ float4 smem[];
    float *tile = reinterpret_cast<float *>(smem);
    const int sw = SW ? SW : p.sw;
    const int tile_y = blockIdx.x / p.tiles_x, tile_x = blockIdx.x - tile_y * p.tiles_x;
    const int img = blockIdx.y;
    const int cl = threadIdx.x & (p.cvb - 1), wk = threadIdx.x >> p.cvb_lg;
    const int nwk = blockDim.x >> p.cvb_lg;
    const int c0 = (blockIdx.z * p.cvb + cl) * V; // this thread's first channel
    const bool c_ok = c0 < p.c;                   // V divides c on the vector path
    const int oy0 = tile_y * p.twy, ox0 = tile_x * p.twx * TW;
    dw_stage<T, V>(p, tile, img, c0, c_ok, cl, wk, nwk, oy0 * p.sh - p.pt, ox0 * sw - p.pl);
    __syncthreads();
    // worker wk is row gy, column group gx of the tile (rows vary fastest between neighbouring
    // workers: the row pitch then spreads them over banks)
    const int gy = wk % p.twy, gx = wk / p.twy;
    const int oy = oy0 + gy, ox = ox0 + gx * TW;
    if (!c_ok || oy >= p.oh || ox >= p.ow) return;
    float acc[TW][V];
    dw_compute<V, KW, SW, TW>(p, tile, p.w + c0, gy, gx, cl, acc);
    dw_epilogue<T, V, TW>(p, acc, img, oy, ox, c0);
}

constexpr size_t smem_cap = 48 << 10; // the default limit: no opt-in attribute needed

// The register-blocked kernel for the common shapes (square 3x3 and 5x5 kernels at stride 1 or
// 2, C a multiple of 8): every depthwise conv of MobileNet and EfficientNet. Each thread keeps
// its two channels' whole kernel (K*K float2) in registers for its TH x TW outputs, and walks
// the input rows of its patch once, each row's columns read as float2 from the tile and fed to
// every (output row, kernel row) pair that uses it: about K*K*TH*TW*2 FMAs for
// ((TH-1)*S+K) * ((TW-1)*S+K) shared loads. Tiles are planned per shape (plan_tile2) to stage
// as few pixels twice as possible, which matters most when a SiLU prologue runs per staged
// value; for 7x7 and 14x14 images one tile is the whole image.
constexpr int CS = 32; // channels per block: 16 threads of 2 channels read one pixel's 128 bytes

// one staged chunk: 8 channels, 16 or 32 bytes, read with 16-byte accesses
template <typename T> struct alignas(16) raw8 { T e[8]; };

struct dw2_params {
    const void *x, *b, *z, *pb;
    const float *w; // (k, k, c) float
    void *y;
    int h, w_, c, oh, ow, pt, pl;
    si_act act, pact;
    int pro;     // apply the prologue
    int gx, gy;  // thread groups (of 16 threads, TH x TW outputs each) along W and H
    int ih, iw;  // the input tile
    int dy, dx;  // a staging thread's step through the tile's pixels, as (rows, columns)
    int tiles_x; // tile columns per image
};

// 1. the tile: thread t stages chunk t % 4 (8 channels) of pixels t / 4, t / 4 + nt / 4, ...
// (blockDim.x is a multiple of 16, so the chunk and the prologue's bias stay the thread's)
template <typename T>
__device__ __forceinline__ void dw2_stage(const dw2_params &p, float *tile, int img, int cb,
                                          int iy0, int ix0) {
    const int g = threadIdx.x & 3, cg = cb + 8 * g;
    const bool c_ok = cg < p.c; // 8 divides c
    float pb[8];
#pragma unroll
    for (int i = 0; i < 8; i++) pb[i] = 0.f;
    if (p.pro && p.pb && c_ok) {
        const raw8<T> v = *reinterpret_cast<const raw8<T> *>((const T *)p.pb + cg);
#pragma unroll
        for (int i = 0; i < 8; i++) pb[i] = si_to_f(v.e[i]);
    }
    const T *x = (const T *)p.x + (int64_t)img * p.h * p.w_ * p.c + cg;
    // write the two float4 halves in an order that alternates every 4 threads: the 8 threads of
    // one store wavefront then cover all 32 banks
    const int swap = (threadIdx.x >> 2) & 1;
    const int items = p.ih * p.iw, step = blockDim.x >> 2;
    int q = threadIdx.x >> 2;
    int ty = q / p.iw, tx = q - ty * p.iw;
    constexpr int U = 4; // loads in flight per thread before the stores
    for (; q < items; q += U * step) {
        raw8<T> v[U];
        bool in[U];
        int pos[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int gy = iy0 + ty, gx = ix0 + tx;
            in[u] = c_ok && ty < p.ih && gy >= 0 && gy < p.h && gx >= 0 && gx < p.w_;
            pos[u] = (ty * p.iw + tx) * CS + 8 * g;
            if (in[u]) v[u] = *reinterpret_cast<const raw8<T> *>(x + (gy * p.w_ + gx) * p.c);
            tx += p.dx;
            ty += p.dy;
            if (tx >= p.iw) tx -= p.iw, ty++;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (q + u * step >= items) break;
            float f[8];
            stage_chunk<sizeof(T) == 2>(v[u].e, in[u], p.pro, pb, p.pact, f);
            const float4 lo = make_float4(f[0], f[1], f[2], f[3]);
            const float4 hi = make_float4(f[4], f[5], f[6], f[7]);
            float4 *t = reinterpret_cast<float4 *>(tile + pos[u]);
            t[swap] = swap ? hi : lo;
            t[1 - swap] = swap ? lo : hi;
        }
    }
}

// 2. TH x TW outputs of channels c, c + 1 from the tile at tb (the group's first input pixel):
// the kernel in registers, each input row read once and fed to every output row that uses it
template <int K, int S, int TH, int TW>
__device__ __forceinline__ void dw2_compute(const dw2_params &p, const float *tb, int c,
                                            float2 (&acc)[TH][TW]) {
    float2 wk[K][K];
#pragma unroll
    for (int r = 0; r < K; r++)
#pragma unroll
        for (int s = 0; s < K; s++)
            wk[r][s] = *reinterpret_cast<const float2 *>(p.w + (r * K + s) * p.c + c);
#pragma unroll
    for (int t = 0; t < TH; t++)
#pragma unroll
        for (int u = 0; u < TW; u++) acc[t][u] = make_float2(0.f, 0.f);
    constexpr int IH = (TH - 1) * S + K, IW = (TW - 1) * S + K;
#pragma unroll
    for (int ir = 0; ir < IH; ir++) { // input row ir: kernel row ir - t*S of output row t
        float2 in[IW];
#pragma unroll
        for (int j = 0; j < IW; j++)
            in[j] = *reinterpret_cast<const float2 *>(tb + (ir * p.iw + j) * CS);
#pragma unroll
        for (int t = 0; t < TH; t++) {
            const int r = ir - t * S;
            if (r < 0 || r >= K) continue;
#pragma unroll
            for (int u = 0; u < TW; u++)
#pragma unroll
                for (int s = 0; s < K; s++) {
                    acc[t][u].x = fmaf(in[u * S + s].x, wk[r][s].x, acc[t][u].x);
                    acc[t][u].y = fmaf(in[u * S + s].y, wk[r][s].y, acc[t][u].y);
                }
        }
    }
}

// 3. the epilogue, the CPU's order: (conv + bias) + residual, then the activation
template <typename T, int TH, int TW>
__device__ __forceinline__ void dw2_epilogue(const dw2_params &p, const float2 (&acc)[TH][TW],
                                             int img, int oy, int ox, int c) {
    float b[2] = {0.f, 0.f};
    if (p.b) load_f<T, 2>((const T *)p.b + c, b);
#pragma unroll
    for (int t = 0; t < TH; t++) {
        if (oy + t >= p.oh) break;
#pragma unroll
        for (int u = 0; u < TW; u++) {
            if (ox + u >= p.ow) break;
            const int64_t o = (((int64_t)img * p.oh + oy + t) * p.ow + ox + u) * p.c + c;
            float f[2] = {acc[t][u].x + b[0], acc[t][u].y + b[1]};
            if (p.z) {
                float zf[2];
                load_f<T, 2>((const T *)p.z + o, zf);
                f[0] += zf[0], f[1] += zf[1];
            }
            si_act_vec<sizeof(T) == 2>(f, p.act);
            *reinterpret_cast<vec<T, 2> *>((T *)p.y + o) = from_f<T, 2>(f);
        }
    }
}

// Template: T element type, K kernel size, S stride, TH x TW outputs per thread (rows, columns).
// The grid: x = tile (row-major over the image), y = image, z = channel slice of CS. The block:
// 16 * gx * gy threads; the tile in shared memory is (ih, iw, CS) float, the prologue applied.
template <typename T, int K, int S, int TH, int TW>
__global__ void __launch_bounds__(256, 2) k_dwconv2(const dw2_params p) {
    extern __shared__ float4 smem[];
    float *tile = reinterpret_cast<float *>(smem);
    const int tile_y = blockIdx.x / p.tiles_x, tile_x = blockIdx.x - tile_y * p.tiles_x;
    const int img = blockIdx.y, cb = blockIdx.z * CS;
    const int oy0 = tile_y * p.gy * TH, ox0 = tile_x * p.gx * TW;
    dw2_stage<T>(p, tile, img, cb, oy0 * S - p.pt, ox0 * S - p.pl);
    __syncthreads();
    // thread group grp of the tile: TH x TW outputs of channels c, c + 1 per thread
    const int cp = threadIdx.x & 15, grp = threadIdx.x >> 4;
    const int gxi = grp % p.gx, gyi = grp / p.gx;
    const int c = cb + 2 * cp;
    const int oy = oy0 + gyi * TH, ox = ox0 + gxi * TW;
    if (c >= p.c || oy >= p.oh || ox >= p.ow) return;
    float2 acc[TH][TW];
    dw2_compute<K, S, TH, TW>(p, tile + ((gyi * TH * S) * p.iw + gxi * TW * S) * CS + 2 * cp, c,
                              acc);
    dw2_epilogue<T, TH, TW>(p, acc, img, oy, ox, c);
}

// The rows (or columns) of the image that the input tiles along one axis stage, summed over the
// tiles: n tiles of span in (input), starting every step at -pad, over an image of size len.
static long staged_1d(int n, int step, int span, int pad, int len) {
    long sum = 0;
    for (int i = 0; i < n; i++) {
        int a = i * step - pad, b = a + span;
        a = a < 0 ? 0 : a;
        b = b > len ? len : b;
        sum += b > a ? b - a : 0;
    }
    return sum;
}

// Tile for k_dwconv2 with TH x TW outputs per thread: the (gx, gy) of at most 16 groups (256
// threads) whose tile fits the default 48 KB of shared memory and whose estimated instruction
// count per image and channel pair is least. The estimate counts what grows with the plan:
// every staged pixel (load, convert, store; the prologue's bias and activation), every computed
// output (in-image or not: K*K FMAs, the shared loads of the thread's patch) and a fixed cost
// per thread (its weights). Returns that cost, or -1 when nothing fits.
static double plan_tile2(dw2_params *p, int k, int s, int th, int tw) {
    const int ncx = (p->ow + tw - 1) / tw, ncy = (p->oh + th - 1) / th;
    const double pix = 4 + (p->pro ? 2 + (p->pact.kind == SI_ACT_NONE ? 0 : 8) : 0);
    const double ld = (double)((th - 1) * s + k) * ((tw - 1) * s + k) / (th * tw);
    const double out = 2.0 * k * k + ld + 4;
    double best = -1;
    for (int gx = 1; gx <= 16 && gx <= ncx; gx++)
        for (int gy = 1; gx * gy <= 16 && gy <= ncy; gy++) {
            const int ih = (gy * th - 1) * s + k, iw = (gx * tw - 1) * s + k;
            if ((size_t)ih * iw * CS * sizeof(float) > smem_cap) continue;
            const int tx = (ncx + gx - 1) / gx, ty = (ncy + gy - 1) / gy;
            const double staged = (double)staged_1d(ty, gy * th * s, ih, p->pt, p->h) *
                                  staged_1d(tx, gx * tw * s, iw, p->pl, p->w_);
            const double outs = (double)tx * ty * gx * gy * th * tw;
            const double cost =
                staged * pix + outs * out + (double)tx * ty * gx * gy * (k * k + 40);
            if (best < 0 || cost < best) {
                best = cost;
                p->gx = gx, p->gy = gy, p->ih = ih, p->iw = iw, p->tiles_x = tx;
            }
        }
    if (best >= 0) {
        const int step = 4 * p->gx * p->gy; // staging threads per chunk column: blockDim / 4
        p->dy = step / p->iw;
        p->dx = step % p->iw;
    }
    return best;
}

template <typename T, int K, int S, int TH, int TW>
static cudaError_t launch2(cudaStream_t st, const dw2_params &p, int n) {
    const int ncy = (p.oh + TH - 1) / TH;
    const int64_t tiles = (int64_t)p.tiles_x * ((ncy + p.gy - 1) / p.gy);
    const int slices = (p.c + CS - 1) / CS;
    if (tiles > INT32_MAX || n > 65535 || slices > 65535) return cudaErrorInvalidConfiguration;
    dim3 grid((unsigned)tiles, (unsigned)n, (unsigned)slices), block(16 * p.gx * p.gy);
    size_t smem = (size_t)p.ih * p.iw * CS * sizeof(float);
    k_dwconv2<T, K, S, TH, TW><<<grid, block, smem, st>>>(p);
    return cudaGetLastError();
}

// k_dwconv2 at the cheaper of one and two outputs per thread along W. Rows per thread, as
// measured best per layer of MobileNetV2 and EfficientNet-B0 on the H100 (TH 7, 4 and 2 tried):
// 7 at stride 1 (their feature maps are 7 * 2^k on a side, so no rows are wasted); at stride 2,
// where the input tile is four times the output's, 2 (3x3) and 4 (5x5): less shared memory per
// thread, more threads per SM to hide the staging loads' latency.
template <typename T, int K, int S> static cudaError_t run2(cudaStream_t st, dw2_params p, int n) {
    constexpr int TH = S == 1 ? 7 : K == 3 ? 2 : 4;
    dw2_params p1 = p, p2 = p;
    const double c1 = plan_tile2(&p1, K, S, TH, 1), c2 = plan_tile2(&p2, K, S, TH, 2);
    if (c2 >= 0 && (c1 < 0 || c2 <= c1)) return launch2<T, K, S, TH, 2>(st, p2, n);
    if (c1 >= 0) return launch2<T, K, S, TH, 1>(st, p1, n);
    return cudaErrorInvalidConfiguration;
}

// Whether k_dwconv2 runs the shape: square 3x3 or 5x5 at equal strides 1 or 2, 8 | c, and the
// pointers aligned for its 16-byte staging loads and 2-channel weight, bias and output accesses.
static bool dw2_fits(const si_dwconv_args *a) {
    const si_conv_shape *s = &a->s;
    if (s->kh != s->kw || (s->kh != 3 && s->kh != 5) || s->sh != s->sw || s->sh > 2) return false;
    if (s->c % 8 != 0 || (uintptr_t)a->w % 8 != 0) return false;
    const void *ptrs[] = {a->x, a->b, a->z, a->pb, a->y};
    for (const void *q : ptrs)
        if ((uintptr_t)q % 16 != 0) return false; // NULL is aligned
    return true;
}

template <typename T> static cudaError_t dispatch2(cudaStream_t st, const si_dwconv_args *a) {
    const si_conv_shape *s = &a->s;
    dw2_params p;
    memset(&p, 0, sizeof p);
    p.x = a->x, p.b = a->b, p.z = a->z, p.pb = a->pb, p.w = a->w, p.y = a->y;
    p.h = s->h, p.w_ = s->w, p.c = s->c, p.oh = s->oh, p.ow = s->ow, p.pt = s->pt, p.pl = s->pl;
    p.act = a->act, p.pact = a->pact;
    p.pro = a->pb != NULL || a->pact.kind != SI_ACT_NONE;
    if (s->kh == 3) return s->sh == 1 ? run2<T, 3, 1>(st, p, s->n) : run2<T, 3, 2>(st, p, s->n);
    return s->sh == 1 ? run2<T, 5, 1>(st, p, s->n) : run2<T, 5, 2>(st, p, s->n);
}

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

template <typename T, int V, int KW, int SW, int TW, int MINB = 3>
static cudaError_t launch(cudaStream_t st, dw_params p, int n) {
    if (!plan_tile(&p, V, TW)) return cudaErrorInvalidConfiguration;
    int64_t tiles = (int64_t)p.tiles_x * ((p.oh + p.twy - 1) / p.twy);
    int slices = (p.c / V + p.cvb - 1) / p.cvb;
    if (tiles > INT32_MAX || n > 65535 || slices > 65535) return cudaErrorInvalidConfiguration;
    dim3 grid((unsigned)tiles, (unsigned)n, (unsigned)slices), block(p.twy * p.twx * p.cvb);
    size_t smem = (size_t)p.plane * V * sizeof(float);
    k_dwconv<T, V, KW, SW, TW, MINB><<<grid, block, smem, st>>>(p);
    return cudaGetLastError();
}

// The specialised widths and strides (what k_dwconv2 leaves: 7-wide, odd C, unaligned views): TW
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
    // ConvNeXt's 7x7 at stride 1 in FP16: 4 channels x 8 outputs per thread and two blocks per
    // SM (the registers for that reuse), where 8 x 2 spent its time reading the tile: its 18
    // layers 4.92 -> 3.62 ms a batch of 256 on the H100 (4 x 4, 4 x 12, 4 x 16 and 8 x 4 measured
    // slower). BF16 and FP32 keep 8 x 2 until measured.
    if (std::is_same<T, __half>::value && p.kw == 7 && p.sw == 1 && p.c % 4 == 0 && aligned)
        return launch<T, 4, 7, 1, 8, 2>(st, p, a->s.n);
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
    if (dw2_fits(a)) {
        if (t == SI_GT_F16) return dispatch2<__half>(st, a);
        if (t == SI_GT_BF16) return dispatch2<__nv_bfloat16>(st, a);
        return dispatch2<float>(st, a);
    }
    if (t == SI_GT_F16) return run<__half>(st, a, p);
    if (t == SI_GT_BF16) return run<__nv_bfloat16>(st, a, p);
    return run<float>(st, a, p);
}
