// Linear layers whose epilogue cuBLASLt lacks: Y (M, N) = act(X (M, K) W (K, N) + b) with ONNX's
// erf GELU (cuBLASLt's GELU epilogue is the tanh approximation), the tanh GELU, SiLU or Swish
// (CLIP's QuickGELU), on CUTLASS's Hopper kernels (TMA loads, wgmma, a warp-specialized
// persistent schedule). The 4x-wide hidden tensor of a transformer's MLP is then written once
// instead of written, read and written again by a separate activation pass. The same kernels
// without an activation, with or without a residual C (Y = X W + b + C), are candidates beside
// cuBLASLt's algorithms for the other Linear layers (gemm.cu times both). Built for sm_90a
// only; callers ask si_cuda_linear90_ok first (linear90.cuh).
#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

#include "cuda/linear90.cuh" // SI_HAVE_LINEAR90 defined: this file defines its functions
#include "cuda/ptx.cuh"

using namespace cute;

namespace {

// CUTLASS's epilogue applies an activation to fragments: Scalar's formula on each element
template <class Scalar, class T, int N> struct each {
    template <class... A>
    CUTLASS_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const &v,
                                                   A const &...a) const {
        cutlass::Array<T, N> y;
        Scalar f;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i) y[i] = f(v[i], a...);
        return y;
    }
};

// The special-function unit's 2^x and 1/x as single instructions (ex2, rcp: cuda/ptx.cuh).
// Without .ftz, exp2f's and __fdividef's approximations each bring a range test and two scalings
// for subnormal arguments and results (an FSETP and two FMULs apiece in the SASS): a third of the
// erf GELU's epilogue. No argument here is subnormal (the reciprocals' are >= 1); a 2^x that would
// be is flushed to zero, which changes the sigmoids' 1 + 2^x not at all and the GELU only below
// x = -13, where its exact value is under 1e-37 in magnitude: zero in FP16, a BF16 subnormal
// otherwise.

// The activations, in FP32 on the accumulator before the output's one rounding to FP16 or BF16.
// The cooperative schedule's epilogue does not overlap the next tile's MMAs, and the ping-pong
// one's hides it only while it is shorter than a tile's MMAs, so each instruction per element
// here costs the tensor cores time (ncu on ViT-B's fc1, ping-pong 128x128: 26 instructions an
// element, 11 of them FMULs, before these were written as they are now). erff (two polynomials,
// their coefficients selected per element) gives way to Abramowitz and Stegun's 7.1.26,
// erfc(z) = t P(t) exp(-z^2) with t = 1 / (1 + p z), |error| <= 1.5e-7 on erf: GELU within
// 3.3e-7 of the exact value on [-12, 12] in a float32 model of this code, far below FP16's
// rounding. With a = |x| and q = erfc(a / sqrt 2) / 2, GELU(x) = max(x, 0) - a q for either sign
// (x - x q for x >= 0, x q for x < 0), without 1 + erf's cancellation; the 1 / sqrt 2, the 1/2
// and log2(e) are folded into the constants: 12 instructions, two on the special-function unit.
template <class T> struct gelu_erf {
    CUTLASS_DEVICE T operator()(T v) const {
        float f = (float)v, a = fabsf(f);
        float t = rcp(fmaf(0.3275911f * 0.70710678118654752f, a, 1.f));
        float q =
            ((((0.5f * 1.061405429f * t - 0.5f * 1.453152027f) * t + 0.5f * 1.421413741f) * t -
              0.5f * 0.284496736f) *
                 t +
             0.5f * 0.254829592f) *
            t;
        q *= ex2(f * (f * -0.72134752044448170f)); // exp(-x^2 / 2) = 2^(-x^2 log2(e) / 2)
        return T(fmaf(-a, q, fmaxf(f, 0.f)));
    }
};
template <class T, int N> struct gelu_erf<cutlass::Array<T, N>> : each<gelu_erf<T>, T, N> {};
// The sigmoid-shaped ones as x / (1 + 2^(k x)): x / y -> 0 as y -> inf, the limit wanted. (An
// IEEE division or reciprocal brings a slow path that the compiler emits as a subroutine call per
// element: with one, the fused QuickGELU took 0.66-0.67 ms a ViT-B layer on an H100 and lost to
// cuBLASLt and a separate pass.) The tanh GELU: x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
template <class T> struct gelu_tanh {
    CUTLASS_DEVICE T operator()(T v) const {
        constexpr float k1 = -2.f * 0.79788456080286536f * 1.4426950408889634f;
        float f = (float)v;
        return T(f * rcp(1.f + ex2(f * fmaf(k1 * 0.044715f, f * f, k1))));
    }
};
template <class T, int N> struct gelu_tanh<cutlass::Array<T, N>> : each<gelu_tanh<T>, T, N> {};

// x sigmoid(alpha x): SiLU (alpha 1) and CLIP's QuickGELU (alpha 1.702); k = -alpha log2(e),
// given at run time
struct swish_args {
    float k = -1.4426950408889634f;
};
template <class T> struct swish {
    using Arguments = swish_args;
    CUTLASS_DEVICE T operator()(T v, swish_args const &a) const {
        float f = (float)v;
        return T(f * rcp(1.f + ex2(f * a.k)));
    }
};
template <class T, int N> struct swish<cutlass::Array<T, N>> : each<swish<T>, T, N> {
    using Arguments = swish_args;
};
// Tiles: cooperative ones (two consumer warp groups share each tile, and its epilogue, which
// the tensor cores wait for) and ping-pong ones (the groups alternate tiles, one's epilogue
// behind the other's MMAs while it is the shorter). Each is M x N x 64 with a cluster of CM x CN
// CTAs, and stores its output in EM x EN pieces (each through shared memory, a TMA store and a
// barrier): CUTLASS's own choice (64 x 32 for ping-pong, 128 x 32 cooperative) left the
// activation's epilogue on the critical path. At batch 256 on an H100 (init's timing, ms):
//   ViT-B fc1 (erf GELU), ping-pong 128 x 128: 0.383 with 64 x 32 pieces, 0.364 with 64 x 128;
//   CLIP fc1 (QuickGELU), the same: 0.348 -> 0.339; ConvNeXt-T's first stage, cooperative
//   256 x 128: 0.562 (128 x 32) -> 0.544 (128 x 64) -> 0.536 (128 x 128); DeiT-S fc1 cooperative
//   128 x 256: 0.163 -> 0.159 (128 x 64); ping-pong 64 x 256: 0.194 -> 0.171 (64 x 128).
// Ping-pong 128 x 128 with 64 x 64 pieces is there for Linear layers without an activation: it
// beat cuBLASLt on DINOv2-S's QKV and proj, Swin-T's first proj and fc2 and ConvNeXt-T's first
// fc2. si_cuda_linear90_run takes init's choice (gemm.cu times them all).
template <int M, int N, int CM, int CN, bool PingPong, int EM, int EN> struct tile {
    using Tile = Shape<Int<M>, Int<N>, _64>;
    using Cluster = Shape<Int<CM>, Int<CN>, _1>;
    using EpiTile = Shape<Int<EM>, Int<EN>>;
    using Main = cute::conditional_t<PingPong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                     cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
    using Epi = cute::conditional_t<PingPong, cutlass::epilogue::TmaWarpSpecialized,
                                    cutlass::epilogue::TmaWarpSpecializedCooperative>;
};
// one tile: its kind, M x N, cluster CM x CN and output pieces EM x EN, and a name saying them
#define TILE(ID, KIND, PP, M, N, CM, CN, EM, EN)                                                   \
    struct ID : tile<M, N, CM, CN, PP, EM, EN> {                                                   \
        static constexpr const char *name = KIND " " #M "x" #N " (stores " #EM "x" #EN ")";        \
    };
TILE(coop, "cooperative", false, 128, 256, 2, 1, 128, 64)
TILE(coop256, "cooperative", false, 256, 128, 1, 2, 128, 64)
TILE(coop256w, "cooperative", false, 256, 128, 1, 2, 128, 128)
TILE(pingpong128, "ping-pong", true, 128, 128, 2, 1, 64, 128)
TILE(pingpong128n, "ping-pong", true, 128, 128, 2, 1, 64, 64)
TILE(pingpong, "ping-pong", true, 64, 256, 2, 1, 64, 128)
#undef TILE

// Res: C (the residual) is read by the epilogue's TMA loads and added with beta 1
template <class E, template <class> class Act, class Cfg, bool Res> struct linear {
    using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<Act, E, float, E, E, float>;
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::Tile,
        typename Cfg::Cluster, typename Cfg::EpiTile, float, float,
        cute::conditional_t<Res, E, void>, cutlass::layout::RowMajor, 8, E,
        cutlass::layout::RowMajor, 8, typename Cfg::Epi, Fusion>::CollectiveOp;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E, cutlass::layout::RowMajor, 8, E,
        cutlass::layout::RowMajor, 8, float, typename Cfg::Tile, typename Cfg::Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
            sizeof(typename Epilogue::SharedStorage))>,
        typename Cfg::Main>::CollectiveOp;
    using Kernel =
        cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

    static typename Gemm::Arguments args(const si_linear90 *p) {
        auto sa =
            cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(p->m, p->k, 1));
        auto sb =
            cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(p->n, p->k, 1));
        auto sd =
            cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(p->m, p->n, 1));
        typename Gemm::Arguments a{cutlass::gemm::GemmUniversalMode::kGemm,
                                   {p->m, p->n, p->k, 1},
                                   {(const E *)p->x, sa, (const E *)p->w, sb},
                                   {{}, Res ? (const E *)p->c : nullptr, sd, (E *)p->y, sd}};
        a.epilogue.thread.alpha = 1.f;
        a.epilogue.thread.beta = Res ? 1.f : 0.f;
        a.epilogue.thread.bias_ptr = (const E *)p->bias;
        if constexpr (cute::is_same_v<Act<float>, swish<float>>)
            a.epilogue.thread.activation.k = -p->alpha * 1.4426950408889634f;
        return a;
    }
    static int check(const si_linear90 *p, size_t *ws) {
        typename Gemm::Arguments a = args(p);
        if (Gemm::can_implement(a) != cutlass::Status::kSuccess) return -1;
        *ws = Gemm::get_workspace_size(a);
        return 0;
    }
    static cudaError_t run(const si_linear90 *p, void *ws, cudaStream_t s) {
        Gemm g;
        typename Gemm::Arguments a = args(p);
        if (g.initialize(a, ws, s) != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
        if (g.run(s) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
        return cudaGetLastError();
    }
};

// no activation: a Linear layer with its bias, and its residual where it has one
template <class T> using none = cutlass::epilogue::thread::Identity<T>;

// one table row per (type, activation, residual, tile): si_linear90.variant indexes it
struct entry {
    int type, act;
    bool res;
    const char *tile;
    int (*check)(const si_linear90 *, size_t *);
    cudaError_t (*run)(const si_linear90 *, void *, cudaStream_t);
};
#define ROW(T, E, A, F, R, C)                                                                      \
    { T, A, R, C::name, linear<E, F, C, R>::check, linear<E, F, C, R>::run }
#define ROWS(T, E, A, F, R)                                                                        \
    ROW(T, E, A, F, R, coop), ROW(T, E, A, F, R, coop256), ROW(T, E, A, F, R, coop256w),           \
        ROW(T, E, A, F, R, pingpong128), ROW(T, E, A, F, R, pingpong128n),                        \
        ROW(T, E, A, F, R, pingpong)
const entry table[] = {
    ROWS(SI_LINEAR90_F16, cutlass::half_t, SI_LINEAR90_GELU, gelu_erf, false),
    ROWS(SI_LINEAR90_BF16, cutlass::bfloat16_t, SI_LINEAR90_GELU, gelu_erf, false),
    ROWS(SI_LINEAR90_F16, cutlass::half_t, SI_LINEAR90_SWISH, swish, false),
    ROWS(SI_LINEAR90_BF16, cutlass::bfloat16_t, SI_LINEAR90_SWISH, swish, false),
    ROWS(SI_LINEAR90_F16, cutlass::half_t, SI_LINEAR90_GELU_TANH, gelu_tanh, false),
    ROWS(SI_LINEAR90_BF16, cutlass::bfloat16_t, SI_LINEAR90_GELU_TANH, gelu_tanh, false),
    ROWS(SI_LINEAR90_F16, cutlass::half_t, SI_LINEAR90_NONE, none, false),
    ROWS(SI_LINEAR90_BF16, cutlass::bfloat16_t, SI_LINEAR90_NONE, none, false),
    ROWS(SI_LINEAR90_F16, cutlass::half_t, SI_LINEAR90_NONE, none, true),
    ROWS(SI_LINEAR90_BF16, cutlass::bfloat16_t, SI_LINEAR90_NONE, none, true),
};
#undef ROWS
#undef ROW
const int n_table = (int)(sizeof table / sizeof table[0]);

} // namespace

extern "C" int si_cuda_linear90_variants(const si_linear90 *p, int *out, int cap) {
    int n = 0;
    for (int i = 0; i < n_table && n < cap; i++)
        if (table[i].type == p->type && table[i].act == p->act && table[i].res == (p->c != NULL))
            out[n++] = i;
    return n;
}

extern "C" int si_cuda_linear90_ok(const si_linear90 *p, int variant, size_t *ws) {
    if (variant < 0 || variant >= n_table) return 0;
    const entry *e = &table[variant];
    if (e->type != p->type || e->act != p->act || e->res != (p->c != NULL)) return 0;
    // 16-byte rows and bases for TMA (every slot's buffers sit at the same alignment as slot
    // 0's, which init asks about); the bias is read 8 elements at a time
    uintptr_t bases =
        (uintptr_t)p->x | (uintptr_t)p->w | (uintptr_t)p->y | (uintptr_t)p->bias | (uintptr_t)p->c;
    if (p->k % 8 || p->n % 8 || (bases & 15)) return 0;
    return e->check(p, ws) == 0;
}

extern "C" cudaError_t si_cuda_linear90_run(const si_linear90 *p, int variant, void *ws,
                                            cudaStream_t s) {
    if (variant < 0 || variant >= n_table) return cudaErrorInvalidValue;
    return table[variant].run(p, ws, s);
}

extern "C" const char *si_cuda_linear90_tile(int variant) {
    return variant >= 0 && variant < n_table ? table[variant].tile : "?";
}
