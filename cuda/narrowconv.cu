// The narrow convolution of cuda/narrowconv.cuh. A thread computes MT output channels of PX
// output pixels. For each tap of its window it loads the input pixels' channels, as 16-byte
// vectors where x is channel-last with c a multiple of the vector (VX values a load), else one
// value at a time through the strides (the image's 3 channels), and multiplies each into its MT
// accumulators. The weights of the block's MT channels sit in shared memory as float (tap, c,
// MT): every thread of a warp reads the same ones at once (a broadcast), MT/4 float4 loads per
// input value, each used for PX pixels. A warp's pixels are consecutive, so its stores are
// contiguous when m == MT and MT * sizeof(T) bytes apart otherwise.
#include "cuda/act.cuh"
#include "cuda/elem.cuh"
#include "cuda/kernels.cuh"
#include "cuda/narrowconv.cuh"

namespace {

constexpr int NC_THREADS = 128;
constexpr int PX = 2; // output pixels a thread

// 16 bytes of T, moved as one access
template <typename T> struct alignas(16) chunk { T e[16 / sizeof(T)]; };

// acc += the MT values at v, read as 16-byte chunks
template <typename T, int MT>
__device__ __forceinline__ void add_chunks(float (&acc)[MT], const T *v) {
    constexpr int E = 16 / sizeof(T);
#pragma unroll
    for (int k = 0; k < MT / E; k++) {
        const chunk<T> c = reinterpret_cast<const chunk<T> *>(v)[k];
#pragma unroll
        for (int u = 0; u < E; u++) acc[k * E + u] += si_to_f(c.e[u]);
    }
}

// bias, residual and activation on one pixel's MT sums, then its one store
template <typename T, int MT>
__device__ __forceinline__ void nc_store(const si_nconv_args &p, float (&acc)[MT], int pix,
                                         int m0) {
    constexpr int E = 16 / sizeof(T); // values per 16-byte chunk; MT is a multiple of it
    const int64_t off = (int64_t)pix * p.s.m + m0;
    if (p.b) add_chunks<T>(acc, (const T *)p.b + m0);
    if (p.z) add_chunks<T>(acc, (const T *)p.z + off);
    si_act_vec<sizeof(T) == 2>(acc, p.act);
    chunk<T> *y = reinterpret_cast<chunk<T> *>((T *)p.y + off);
#pragma unroll
    for (int k = 0; k < MT / E; k++) {
        chunk<T> v;
#pragma unroll
        for (int u = 0; u < E; u++) v.e[u] = si_from_f<T>(acc[k * E + u]);
        y[k] = v;
    }
}

// VX > 1: x's channels are contiguous and each pixel's first is 16-byte aligned (VX == 16 /
// sizeof(T) and c a multiple of it). A thread's PX pixels lie NC_THREADS apart, so each of its
// loads and stores is a warp's contiguous run, and each weight it reads from shared memory
// feeds PX * 4 FMAs (one per pixel and channel): with PX 1 the shared loads bounded the kernel.
template <typename T, int MT, int K, int VX>
__global__ void __launch_bounds__(NC_THREADS) k_nconv(const si_nconv_args p) {
    extern __shared__ float4 ws4[]; // (K * K, c, MT / 4)
    float *ws = reinterpret_cast<float *>(ws4);
    const int m0 = blockIdx.y * MT, n_w = K * K * p.s.c * MT;
    const T *w = (const T *)p.w;
    for (int i = threadIdx.x; i < n_w; i += NC_THREADS) {
        const int mm = i % MT, tc = i / MT; // tc: tap * c + channel
        const int tap = tc / p.s.c, ci = tc - tap * p.s.c;
        ws[i] = si_to_f(w[(int64_t)(m0 + mm) * (K * K * p.wc) + tap * p.wc + ci]);
    }
    __syncthreads();
    // one image's offsets are ints (si_nconv_fits)
    const int xs1 = (int)p.xst[1], xs2 = (int)p.xst[2], xs3 = (int)p.xst[3];
    const int pixels = p.s.n * p.s.oh * p.s.ow;
    const T *x[PX];
    int pix[PX], iy0[PX], ix0[PX];
#pragma unroll
    for (int k = 0; k < PX; k++) {
        pix[k] = (blockIdx.x * PX + k) * NC_THREADS + threadIdx.x;
        const int q = pix[k] < pixels ? pix[k] : 0;
        const int ox = q % p.s.ow, rest = q / p.s.ow, oy = rest % p.s.oh, img = rest / p.s.oh;
        x[k] = (const T *)p.x + img * p.xst[0];
        iy0[k] = pix[k] < pixels ? oy * p.s.sh - p.s.pt : -(1 << 20); // a pixel past the end
        ix0[k] = ox * p.s.sw - p.s.pl;                                // reads nothing
    }
    float acc[PX][MT];
#pragma unroll
    for (int k = 0; k < PX; k++)
#pragma unroll
        for (int i = 0; i < MT; i++) acc[k][i] = 0.f;
#pragma unroll
    for (int r = 0; r < K; r++)
#pragma unroll
        for (int s = 0; s < K; s++) {
            const T *xp[PX];
            bool in[PX], any = false;
#pragma unroll
            for (int k = 0; k < PX; k++) {
                const int iy = iy0[k] + r, ix = ix0[k] + s;
                in[k] = iy >= 0 && iy < p.s.h && ix >= 0 && ix < p.s.w;
                xp[k] = x[k] + (in[k] ? iy * xs2 + ix * xs3 : 0);
                any |= in[k];
            }
            if (!any) continue;
            const float4 *wt = ws4 + (r * K + s) * p.s.c * (MT / 4);
            for (int c0 = 0; c0 < p.s.c; c0 += VX) {
                float xv[PX][VX];
#pragma unroll
                for (int k = 0; k < PX; k++) {
                    if (VX > 1) {
                        chunk<T> v;
                        if (in[k]) v = *reinterpret_cast<const chunk<T> *>(xp[k] + c0);
#pragma unroll
                        for (int u = 0; u < VX; u++) xv[k][u] = in[k] ? si_to_f(v.e[u]) : 0.f;
                    } else {
                        xv[k][0] = in[k] ? si_to_f(xp[k][c0 * xs1]) : 0.f;
                    }
                }
#pragma unroll
                for (int u = 0; u < VX; u++)
#pragma unroll
                    for (int q = 0; q < MT / 4; q++) {
                        const float4 wq = wt[(c0 + u) * (MT / 4) + q];
#pragma unroll
                        for (int k = 0; k < PX; k++) {
                            acc[k][4 * q] += xv[k][u] * wq.x;
                            acc[k][4 * q + 1] += xv[k][u] * wq.y;
                            acc[k][4 * q + 2] += xv[k][u] * wq.z;
                            acc[k][4 * q + 3] += xv[k][u] * wq.w;
                        }
                    }
            }
        }
#pragma unroll
    for (int k = 0; k < PX; k++)
        if (pix[k] < pixels) nc_store<T, MT>(p, acc[k], pix[k], m0);
}

template <typename T, int MT, int K>
cudaError_t launch_k(cudaStream_t st, const si_nconv_args &p, bool vec) {
    const int per_block = NC_THREADS * PX, pixels = p.s.n * p.s.oh * p.s.ow;
    const dim3 grid((unsigned)((pixels + per_block - 1) / per_block), (unsigned)(p.s.m / MT));
    const size_t smem = sizeof(float) * K * K * p.s.c * MT;
    if (vec)
        k_nconv<T, MT, K, 16 / sizeof(T)><<<grid, NC_THREADS, smem, st>>>(p);
    else
        k_nconv<T, MT, K, 1><<<grid, NC_THREADS, smem, st>>>(p);
    return cudaGetLastError();
}

template <typename T> cudaError_t run(cudaStream_t st, const si_nconv_args &p) {
    constexpr int E = 16 / sizeof(T);
    // the vector loads: contiguous channels, each pixel's first 16-byte aligned
    const bool vec = p.xst[1] == 1 && p.s.c % E == 0 && p.xst[0] % E == 0 && p.xst[2] % E == 0 &&
                     p.xst[3] % E == 0 && (uintptr_t)p.x % 16 == 0;
    const bool k3 = p.s.kh == 3;
    // 16 channels a thread where m allows: each input value loaded feeds twice the FMAs
    if (p.s.m % 16 == 0)
        return k3 ? launch_k<T, 16, 3>(st, p, vec) : launch_k<T, 16, 1>(st, p, vec);
    return k3 ? launch_k<T, 8, 3>(st, p, vec) : launch_k<T, 8, 1>(st, p, vec);
}

} // namespace

bool si_nconv_supported(const si_conv_shape *s) {
    return s->group == 1 && s->dh == 1 && s->dw == 1 && s->c >= 1 && s->c <= SI_NCONV_MAX_C &&
           s->m >= 8 && s->m % 8 == 0 && s->kh == s->kw && (s->kh == 1 || s->kh == 3) &&
           s->sh >= 1 && s->sw >= 1 && s->pt >= 0 && s->pl >= 0 && s->pb >= 0 && s->pr >= 0 &&
           s->n >= 1 && s->h >= 1 && s->w >= 1 && s->oh >= 1 && s->ow >= 1 &&
           (int64_t)s->n * s->oh * s->ow < INT32_MAX;
}

bool si_nconv_fits(const si_nconv_args *a) {
    const si_conv_shape *s = &a->s;
    if (!si_nconv_supported(s) || a->wc < s->c) return false;
    if (a->xst[0] < 0 || a->xst[1] < 0 || a->xst[2] < 0 || a->xst[3] < 0) return false;
    // the furthest element of one image from its first: an int
    const int64_t span = a->xst[1] * (s->c - 1) + a->xst[2] * (s->h - 1) + a->xst[3] * (s->w - 1);
    // bias, residual and output are read and written in 16-byte chunks
    return span < INT32_MAX && (uintptr_t)a->y % 16 == 0 && (uintptr_t)a->b % 16 == 0 &&
           (uintptr_t)a->z % 16 == 0;
}

cudaError_t si_k_nconv(cudaStream_t st, int t, const si_nconv_args *a) {
    if (!si_nconv_fits(a)) return cudaErrorInvalidValue;
    if (t == SI_GT_F16) return run<__half>(st, *a);
    if (t == SI_GT_BF16) return run<__nv_bfloat16>(st, *a);
    return run<float>(st, *a);
}
