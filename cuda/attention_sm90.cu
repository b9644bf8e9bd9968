// Attention for short sequences on Hopper's warp-group MMAs (wgmma): Y = softmax(scale Q K^T + B) V
// per matrix (B an optional bias: BEiT's relative positions), head size 64, up to 272 keys (a ViT's
// 197 tokens, DINOv2's 257). One warp group a block, one matrix a block: the matrix's K and V stay
// in shared memory while the group takes its query rows 64 at a time. A tile's scores against every
// key (64 x SP, SP the keys rounded up to a width wgmma has) come from one wgmma chain with Q and K
// in shared memory, and stay in the accumulator registers: the row's max and sum are taken once
// over all of them (no running rescale), the probabilities go to FP16/BF16 in the registers, and P
// V is a second chain with P as the register operand and V read transposed from shared memory. Keys
// past 256, wgmma's widest N, take a 16-wide chain of each MMA beside the 256-wide one, in the same
// batch. Three blocks an SM up to 208 keys (two past), so one block's softmax runs beside another's
// MMAs. cuda/attention.cu's mma.sync kernels do the rest (other head sizes, longer sequences, K
// given as K^T, other GPUs); the CPU twin is si_cpu_attention (src/cpu/kernels.c).
#include <cuda_runtime.h>

#include "cutlass/arch/barrier.h"
#include "cutlass/bfloat16.h"
#include "cutlass/cutlass.h"
#include "cutlass/half.h"

#include "cuda/attention90.cuh"
#include "cuda/attention90_layout.cuh"
#include "cuda/ptx.cuh"

using namespace cute;

// A named namespace, not an anonymous one: nvcc's generated host code for a kernel template in
// an anonymous namespace beside cute's using-directive fails to compile (ambiguous reference).
namespace attn90 {

// rows r0 .. r0 + rows of a (total, D) operand whose rows are ld apart into shared memory at
// base (a multiple of 1024) in cfg's layouts, 16 bytes a thread and copy; zeros past total
template <class E>
__device__ inline void load_rows(uint32_t base, const E *g, int64_t ld, int r0, int total,
                                 int rows) {
    for (int i = threadIdx.x; i < rows * (D / 8); i += NT) {
        const int r = i / (D / 8), c = i % (D / 8);
        const bool ok = r0 + r < total;
        cp16s(base + swizzled(r, c), ok ? g + (r0 + r) * ld + c * 8 : g, ok);
    }
}

// issues C (+)= A B over the k-blocks of a wgmma chain: C zeroed first unless add
template <class Mma, class A, class B, class C>
__device__ inline void chain(Mma &mma, const A &a, const B &b, C &c, bool add) {
    mma.accumulate_ = add ? GMMA::ScaleOut::One : GMMA::ScaleOut::Zero;
#pragma unroll
    for (int kb = 0; kb < size<2>(a); kb++) {
        cute::gemm(mma, a(_, _, kb), b(_, _, kb), c);
        mma.accumulate_ = GMMA::ScaleOut::One;
    }
}

// C = A B as one wgmma chain; the warp group waits for it
template <class Mma, class A, class B, class C>
__device__ inline void wg_gemm(Mma &mma, const A &a, const B &b, C &c) {
    warpgroup_fence_operand(c);
    warpgroup_arrive();
    chain(mma, a, b, c, false);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(c);
}

// C = A B, then C2 = A2 B2 (C2 += A2 B2 if add2; C2 may be C), in one batch the group waits for
template <class Mma, class A, class B, class C, class Mma2, class A2, class B2, class C2>
__device__ inline void wg_gemm2(Mma &mma, const A &a, const B &b, C &c, Mma2 &mma2, const A2 &a2,
                                const B2 &b2, C2 &c2, bool add2) {
    warpgroup_fence_operand(c);
    warpgroup_fence_operand(c2);
    warpgroup_arrive();
    chain(mma, a, b, c, false);
    chain(mma2, a2, b2, c2, add2);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(c);
    warpgroup_fence_operand(c2);
}

// A block a matrix, its rows in 64-row tiles; the next tile's query rows load while this one
// computes (two Q buffers). Blocks take the matrices last first: the QKV projection wrote them in
// row order, so the last ones may still be in the L2 (on an H100: DeiT-S 1% faster than in
// order, ViT-B and CLIP the same). A persistent version, each block's next matrix loading during
// its last tile, took 0.184 ms a ViT-B layer against this one's 0.172: not kept.
template <class E, int SP, int ST, bool BIAS>
__global__ void __launch_bounds__(NT, SP + ST > 208 || BIAS ? 2 : 3)
    k_attn90(si_k_attn p, const E *__restrict__ q, const E *__restrict__ k, const E *__restrict__ v,
             const E *__restrict__ bias, E *__restrict__ y) {
    using C = cfg<E, SP, ST>;
    using CT = typename C::Tail;
    extern __shared__ unsigned char smem_raw[];
    // wgmma's 128-byte swizzle repeats every 1024 bytes: the operands start on such a boundary
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t pad = (1024 - raw % 1024) % 1024;
    E *sq = reinterpret_cast<E *>(smem_raw + pad); // [2][BM][D]: tiles t and t + 1
    E *sk = sq + 2 * C::Q_ELEMS, *sv = sk + C::KV_ELEMS;
    const uint32_t aq = raw + pad, ak = aq + 2 * C::Q_ELEMS * sizeof(E),
                   av = ak + C::KV_ELEMS * sizeof(E);
    const int T_ = (int)p.t, S = (int)p.s, tiles = (T_ + BM - 1) / BM;
    const int tid = threadIdx.x, warp = tid / 32;

    int64_t off[4]; // this block's matrix in each operand
    si_attn_offsets(p, p.nb - 1 - blockIdx.x, off);
    const E *bb = BIAS ? bias + si_attn_bias_off(p, p.nb - 1 - blockIdx.x) : nullptr;
    const E *qb = q + off[0], *kb = k + off[1], *vb = v + off[2];
    E *yb = y + off[3];

    load_rows(ak, kb, p.ld[1], 0, S, SP + ST);
    load_rows(aq, qb, p.ld[0], 0, T_, BM);
    cp_commit();
    load_rows(av, vb, p.ld[2], 0, S, SP + ST);
    cp_commit();
    if (tiles > 1) load_rows(aq + C::Q_ELEMS * sizeof(E), qb, p.ld[0], BM, T_, BM);
    cp_commit();

    typename C::MmaQK mqk;
    typename C::MmaPV mpv;
    auto tq = mqk.get_thread_slice(tid);
    auto tv = mpv.get_thread_slice(tid);
    Tensor tSrK = tq.partition_fragment_B(make_tensor(make_smem_ptr(sk), typename C::LayK{}));
    Tensor tOrV = tv.partition_fragment_B(make_tensor(make_smem_ptr(sv), typename C::LayVt{}));
    Tensor tSrS = partition_fragment_C(mqk, Shape<Int<BM>, Int<SP>>{}); // fp32 (2,2,SP/8),1,1
    Tensor tOrO = partition_fragment_C(mpv, Shape<Int<BM>, Int<D>>{});
    Tensor tOrP = tv.partition_fragment_A(make_tensor((E *)nullptr, Shape<Int<BM>, Int<SP>>{}));
    // the score tile as (row half, column), with each element's column in the tile
    Tensor s = make_tensor(tSrS.data(), rowcol(tSrS.layout()));
    Tensor cs = tq.partition_C(make_identity_tensor(Shape<Int<BM>, Int<SP>>{}));
    Tensor col = make_tensor(cs.data(), rowcol(cs.layout()));
    Tensor co = tv.partition_C(make_identity_tensor(Shape<Int<BM>, Int<D>>{}));
    constexpr int NC = size<1>(decltype(s.layout()){});
    // the tail's keys SP .. SP + ST: their scores (4 columns a row half), P and V's rows
    typename CT::MmaQK mqt;
    typename CT::MmaPV mpt;
    auto tqt = mqt.get_thread_slice(tid);
    auto tvt = mpt.get_thread_slice(tid);
    Tensor tSrKt =
        tqt.partition_fragment_B(make_tensor(make_smem_ptr(sk + SP * D), typename CT::LayK{}));
    Tensor tOrVt =
        tvt.partition_fragment_B(make_tensor(make_smem_ptr(sv + SP * D), typename CT::LayVt{}));
    Tensor tSrSt = partition_fragment_C(mqt, Shape<Int<BM>, Int<16>>{});
    Tensor tOrPt = tvt.partition_fragment_A(make_tensor((E *)nullptr, Shape<Int<BM>, Int<16>>{}));
    Tensor st = make_tensor(tSrSt.data(), rowcol(tSrSt.layout()));
    Tensor cst = tqt.partition_C(make_identity_tensor(Shape<Int<BM>, Int<16>>{}));
    Tensor colt = make_tensor(cst.data(), rowcol(cst.layout()));
    constexpr int NCT = size<1>(decltype(st.layout()){});
    const float LOG2E = 1.4426950408889634f;
    const float sl2 = p.scale * LOG2E; // scores to the log2 domain

    for (int t = 0; t < tiles; t++) {
        cp_wait<1>(); // tile t's rows (and, from the first, K and V) have landed for this thread
        cutlass::arch::fence_view_async_shared(); // visible to wgmma's reads
        __syncthreads();
        // the tile's query rows: the A operand of both score chains
        const auto sQ = make_tensor(make_smem_ptr(sq + (t & 1) * C::Q_ELEMS), typename C::LayQ{});
        if constexpr (ST == 0)
            wg_gemm(mqk, tq.partition_fragment_A(sQ), tSrK, tSrS);
        else
            wg_gemm2(mqk, tq.partition_fragment_A(sQ), tSrK, tSrS, mqt,
                     tqt.partition_fragment_A(sQ), tSrKt, tSrSt, false);
        // P V (P in tOrP; the tail's keys, with p_tail(i) as their P, accumulated in the same
        // batch), called in both branches below: one call after them, ptxas serialises
        auto pv = [&](auto p_tail) {
            if constexpr (ST == 0) {
                wg_gemm(mpv, tOrP, tOrV, tOrO);
            } else {
#pragma unroll
                for (int i = 0; i < size(tOrPt); i++) tOrPt(i) = p_tail(i);
                wg_gemm2(mpv, tOrP, tOrV, tOrO, mpt, tOrPt, tOrVt, tOrO, true);
            }
        };
        unsigned char *so = smem_raw + pad + (t & 1) * C::Q_ELEMS * sizeof(E);
        if (t * BM + warp * 16 < T_) { // the warp holds rows inside T
            float inv[2];
            // with a bias (BEiT's relative positions), the scores go to the log2 domain here,
            // scaled and biased, and the exponent below scales by k2 = 1
            const float k2 = BIAS ? 1.f : sl2;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if (S < SP) // keys past S are zero rows of K: out of the softmax
#pragma unroll
                    for (int c = 0; c < NC; c++)
                        if (get<1>(col(h, c)) >= S) s(h, c) = -INFINITY;
                if constexpr (BIAS) {
                    const int r = t * BM + get<0>(col(h, 0)); // the row half's query row
                    const E *br = bb + (int64_t)min(r, T_ - 1) * p.bst_t;
#pragma unroll
                    for (int c = 0; c < NC; c++) {
                        const int j = get<1>(col(h, c));
                        if (j < S) s(h, c) = fmaf(s(h, c), sl2, float(br[j]) * LOG2E);
                    }
                    if constexpr (ST > 0)
#pragma unroll
                        for (int c = 0; c < NCT; c++) {
                            const int j = SP + get<1>(colt(h, c));
                            if (j < S) st(h, c) = fmaf(st(h, c), sl2, float(br[j]) * LOG2E);
                        }
                }
                float m4[4] = {s(h, 0), s(h, 1), s(h, 2), s(h, 3)}; // four chains, not one
#pragma unroll
                for (int c = 4; c < NC; c++) m4[c % 4] = fmaxf(m4[c % 4], s(h, c));
                if constexpr (ST > 0)
#pragma unroll
                    for (int c = 0; c < NCT; c++) {
                        if (SP + get<1>(colt(h, c)) >= S) st(h, c) = -INFINITY;
                        m4[c % 4] = fmaxf(m4[c % 4], st(h, c));
                    }
                float mx = fmaxf(fmaxf(m4[0], m4[1]), fmaxf(m4[2], m4[3]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
                const float m2 = mx == -INFINITY ? 0.f : mx * k2; // a row the bias masks
                float s4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    const float e = ex2(fmaf(s(h, c), k2, -m2));
                    s(h, c) = e;
                    s4[c % 4] += e;
                }
                if constexpr (ST > 0)
#pragma unroll
                    for (int c = 0; c < NCT; c++) {
                        const float e = ex2(fmaf(st(h, c), k2, -m2));
                        st(h, c) = e;
                        s4[c % 4] += e;
                    }
                float sum = (s4[0] + s4[1]) + (s4[2] + s4[3]);
                sum += __shfl_xor_sync(0xffffffff, sum, 1);
                sum += __shfl_xor_sync(0xffffffff, sum, 2);
                inv[h] = sum > 0.f ? 1.f / sum : 0.f;
            }
            // P as wgmma's register operand: the accumulator's ((2, 2, SP / 8)) order is the A
            // fragment's ((2, 2, 2), 1, SP / 16) one, k-block by k-block
#pragma unroll
            for (int i = 0; i < size(tOrP); i++) tOrP(i) = E(tSrS(i));
            pv([&](int i) { return E(tSrSt(i)); });
            // O / sum into this tile's Q buffer (free since the scores), in the same swizzle:
            // rows whole for the stores below (the row half by register index: a row-dependent
            // one put inv in local memory)
#pragma unroll
            for (int i = 0; i < size(tOrO); i += 2) {
                const int r = get<0>(co(i)), c = get<1>(co(i));
                const float f = inv[row_half(i)];
                *reinterpret_cast<uint32_t *>(so + swizzled(r, c / 8) + c % 8 * 2) =
                    E(tOrO(i) * f).raw() | (uint32_t)E(tOrO(i + 1) * f).raw() << 16;
            }
        } else { // rows past T: the group's MMA still needs every warp; P is never stored
#pragma unroll
            for (int i = 0; i < size(tOrP); i++) tOrP(i) = E(0.f);
            pv([](int) { return E(0.f); });
        }
        __syncthreads(); // the tile's O is in shared memory; every MMA is done with its Q rows
        for (int i = tid; i < BM * (D / 8); i += NT) { // Y's rows inside T, 16 bytes a thread
            const int r = i / (D / 8), c = i % (D / 8);
            if (t * BM + r < T_)
                *reinterpret_cast<uint4 *>(yb + (t * BM + r) * p.ld[3] + c * 8) =
                    *reinterpret_cast<const uint4 *>(so + swizzled(r, c));
        }
        __syncthreads(); // read out before the buffer takes tile t + 2's rows
        if (t + 2 < tiles)
            load_rows(aq + (t & 1) * C::Q_ELEMS * sizeof(E), qb, p.ld[0], (t + 2) * BM, T_, BM);
        cp_commit();
    }
    cp_wait<0>();
}

template <class E, int SP, int ST = 0, bool BIAS = false>
cudaError_t launch(cudaStream_t s, const si_k_attn *p, const void *q, const void *k, const void *v,
                   const void *bias, void *y) {
    constexpr size_t smem = cfg<E, SP, ST>::SMEM;
    static bool attr = false;
    if (!attr) {
        cudaError_t e = cudaFuncSetAttribute(
            k_attn90<E, SP, ST, BIAS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        attr = true;
    }
    k_attn90<E, SP, ST, BIAS><<<(unsigned)p->nb, NT, smem, s>>>(
        *p, (const E *)q, (const E *)k, (const E *)v, (const E *)bias, (E *)y);
    return cudaGetLastError();
}

template <class E>
cudaError_t launch_keys(cudaStream_t s, const si_k_attn *p, const void *q, const void *k,
                        const void *v, const void *bias, void *y) {
    if (bias) // built apart: the bias's loads cost the kernels without one registers
        return p->s <= 208 ? launch<E, 208, 0, true>(s, p, q, k, v, bias, y)
                           : launch<E, 256, 0, true>(s, p, q, k, v, bias, y);
    if (p->s <= 128) return launch<E, 128>(s, p, q, k, v, bias, y);
    if (p->s <= 208) return launch<E, 208>(s, p, q, k, v, bias, y);
    if (p->s <= 256) return launch<E, 256>(s, p, q, k, v, bias, y);
    return launch<E, 256, 16>(s, p, q, k, v, bias, y);
}

} // namespace attn90
using namespace attn90;

int si_cuda_attn90_ok(int t, const si_k_attn *p, const void *q, const void *k, const void *v,
                      const void *bias, const void *y) {
    if ((t != SI_GT_F16 && t != SI_GT_BF16) || p->d != D || p->dv != D || !p->trans_b) return 0;
    if (p->s < 65 || p->s > (bias ? 256 : 272) || p->t < 1 || p->nb < 1 || p->nb > INT32_MAX)
        return 0;
    if (bias && p->bst_s != 1) return 0; // a bias's rows contiguous (BEiT's (H, T, S) table)
    const void *ptrs[4] = {q, k, v, y};
    for (int i = 0; i < 4; i++) // 16-byte chunks: cp.async's, and Y's stores
        if (!si_attn_aligned(p, i, ptrs[i], 2, 16)) return 0;
    return 1;
}

cudaError_t si_cuda_attn90_run(cudaStream_t s, int t, const si_k_attn *p, const void *q,
                               const void *k, const void *v, const void *bias, void *y) {
    if (t == SI_GT_F16) return launch_keys<cutlass::half_t>(s, p, q, k, v, bias, y);
    return launch_keys<cutlass::bfloat16_t>(s, p, q, k, v, bias, y);
}
