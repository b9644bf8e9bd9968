/* The layouts the wgmma attention kernel (cuda/attention_sm90.cu) relies on, checked on the host
 * against CuTe's own, for FP16 and BF16 and each key width it is built for (128, 208, 256, and the
 * 16-wide chains of the keys past 256):
 * - its address arithmetic for the 128-byte swizzle (swizzled(), used by its cp.async loads and
 *   its output staging) against CuTe's tensors over the Q, K and V^T layouts wgmma reads;
 * - the registers: which rows and columns each of the 128 threads' score accumulators hold (the
 *   (row half, column) view the softmax walks), that P's register operand of the P V chain
 *   holds, index for index, the same elements as the scores it is converted from, and that the
 *   output's register pairs are adjacent columns of the row row_half() names;
 * - three blocks' shared memory fit an H100's SM up to 208 keys (two at 256 and at 256 + 16).
 * No GPU needed: CuTe's layouts and thread partitions are host code too. */
#include <stdint.h>
#include <stdlib.h>

#include "cutlass/bfloat16.h"
#include "cutlass/half.h"

#include "cuda/attention90_layout.cuh"
#include "tests/test_util.h"

using namespace attn90;

template <class E, int SP, int ST = 0> static void check_layouts(const char *name) {
    using C = cfg<E, SP, ST>;
    const size_t bytes = (size_t)SP * D * sizeof(E);
    E *buf = (E *)aligned_alloc(1024, bytes); /* the kernel aligns its operands on 1024 */
    Tensor sK = make_tensor(make_smem_ptr(buf), typename C::LayK{});
    Tensor sVt = make_tensor(make_smem_ptr(buf), typename C::LayVt{});
    Tensor sQ = make_tensor(make_smem_ptr(buf), typename C::LayQ{});
    int bad_k = 0, bad_v = 0, bad_q = 0;
    for (int r = 0; r < SP; r++)
        for (int c = 0; c < D; c++) {
            const long want = (long)swizzled(r, c / 8) + c % 8 * (long)sizeof(E);
            bad_k += (char *)&sK(r, c) - (char *)buf != want;
            bad_v += (char *)&sVt(c, r) - (char *)buf != want;
            if (r < BM) bad_q += (char *)&sQ(r, c) - (char *)buf != want;
        }
    CHECK_MSG(bad_k == 0 && bad_v == 0 && bad_q == 0,
              "%s SP %d: %d K, %d V^T, %d Q elements not where swizzled() puts them", name, SP,
              bad_k, bad_v, bad_q);
    free(buf);

    typename C::MmaQK mqk;
    typename C::MmaPV mpv;
    int bad_s = 0, bad_p = 0, bad_o = 0;
    for (int tid = 0; tid < NT; tid++) {
        auto tq = mqk.get_thread_slice(tid);
        auto tv = mpv.get_thread_slice(tid);
        Tensor cs = tq.partition_C(make_identity_tensor(Shape<Int<BM>, Int<SP>>{}));
        Tensor col = make_tensor(cs.data(), rowcol(cs.layout()));
        Tensor cp = tv.partition_A(make_identity_tensor(Shape<Int<BM>, Int<SP>>{}));
        Tensor co = tv.partition_C(make_identity_tensor(Shape<Int<BM>, Int<D>>{}));
        const int row0 = tid / 32 * 16 + tid % 32 / 4; /* the thread's first row */
        if (size(cs) != BM * SP / NT || size<1>(col) != SP / 4) bad_s++;
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < size<1>(col); c++) { /* columns 2 t4 + {0, 1} of each group */
                const int want = c / 2 * 8 + tid % 4 * 2 + c % 2;
                bad_s += get<0>(col(h, c)) != row0 + 8 * h || get<1>(col(h, c)) != want;
            }
        for (int i = 0; i < size(cs); i++) bad_s += (get<0>(cs(i)) - row0) / 8 != row_half(i);
        if (size(cp) != size(cs)) bad_p++;
        for (int i = 0; i < size(cp) && i < size(cs); i++)
            bad_p += get<0>(cp(i)) != get<0>(cs(i)) || get<1>(cp(i)) != get<1>(cs(i));
        for (int i = 0; i + 1 < size(co); i += 2)
            bad_o += (get<0>(co(i)) - row0) / 8 != row_half(i) ||
                     get<0>(co(i + 1)) != get<0>(co(i)) || get<1>(co(i + 1)) != get<1>(co(i)) + 1;
    }
    CHECK_MSG(bad_s == 0, "%s SP %d: %d score registers not at the rows/columns assumed", name, SP,
              bad_s);
    CHECK_MSG(bad_p == 0, "%s SP %d: %d P registers not the scores' elements", name, SP, bad_p);
    CHECK_MSG(bad_o == 0, "%s SP %d: %d output register pairs off", name, SP, bad_o);
    /* an H100 SM: 228 KB of shared memory, 1 KB of it reserved per block */
    const int blocks = SP + ST > 208 ? 2 : 3;
    CHECK_MSG(blocks * (C::SMEM + 1024) <= 228 * 1024, "%s SP %d: %d blocks need %zu bytes", name,
              SP, blocks, blocks * (C::SMEM + 1024));
}

int main(void) {
    check_layouts<cutlass::half_t, 128>("fp16");
    check_layouts<cutlass::half_t, 208>("fp16");
    check_layouts<cutlass::half_t, 256>("fp16");
    check_layouts<cutlass::half_t, 16>("fp16"); /* the tail's chains (cfg<E, 256, 16>::Tail) */
    check_layouts<cutlass::half_t, 256, 16>("fp16");
    check_layouts<cutlass::bfloat16_t, 128>("bf16");
    check_layouts<cutlass::bfloat16_t, 208>("bf16");
    check_layouts<cutlass::bfloat16_t, 256>("bf16");
    check_layouts<cutlass::bfloat16_t, 16>("bf16");
    check_layouts<cutlass::bfloat16_t, 256, 16>("bf16");
    return test_finish();
}
