// The shapes and layouts k_attn90 (cuda/attention_sm90.cu) relies on, host- and device-side, so
// tests/test_attn90_layout.cu checks them without a GPU: where the 128-byte swizzle puts a
// 16-byte chunk (the kernel's own address arithmetic against CuTe's layouts), and which rows
// and columns a thread's accumulator, P operand and output registers hold.
#pragma once
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1 // wgmma's N = 208 for a ViT's 197 keys

#include "cute/tensor.hpp"

namespace attn90 {

using namespace cute;

constexpr int BM = 64, D = 64, NT = 128; // query rows a tile, head size, one warp group

// The two MMAs' shapes and the operands' layouts in shared memory: rows of 64 16-bit elements
// (128 bytes) in wgmma's 128-byte swizzle. V is stored as K is, a key a row; P V reads it as
// V^T (D, SP) through a transposed view of the same bytes (the MN-major B operand). ST > 0: ST
// keys past SP (DINOv2's 257th, past wgmma's widest N of 256) in a second chain of each MMA,
// their K and V rows right after the first SP (a multiple of 8 rows: on a 1024-byte boundary).
template <class E, int SP, int ST = 0> struct cfg {
    using MmaQK = decltype(make_tiled_mma(
        GMMA::ss_op_selector<E, E, float, Shape<Int<BM>, Int<SP>, Int<D>>>()));
    using MmaPV =
        decltype(make_tiled_mma(GMMA::rs_op_selector<E, E, float, Shape<Int<BM>, Int<D>, Int<SP>>,
                                                     GMMA::Major::K, GMMA::Major::MN>()));
    using LayQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<E>{}, Shape<Int<BM>, Int<D>>{}));
    using LayK = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<E>{}, Shape<Int<SP>, Int<D>>{}));
    using LayVt =
        decltype(composition(LayK{}, make_layout(Shape<Int<D>, Int<SP>>{}, GenRowMajor{})));
    using Tail = cfg<E, ST ? ST : 16>; // the tail's chains and layouts (unused where ST = 0)
    static constexpr int Q_ELEMS = BM * D, KV_ELEMS = (SP + ST) * D;
    static constexpr size_t SMEM = (2 * Q_ELEMS + 2 * KV_ELEMS) * sizeof(E) + 1024; // + alignment
    static_assert(size(MmaQK{}) == NT && size(MmaPV{}) == NT, "one warp group");
    static_assert(SP % 8 == 0 && (ST == 0 || ST == 16), "the tail: one k-block of P V");
};
// byte offset of 16-byte chunk c of row r in these layouts, from a 1024-byte boundary: the
// swizzle acts on the address, chunk c ^ r % 8 of the row's 128 bytes
CUTE_HOST_DEVICE constexpr uint32_t swizzled(int r, int c) {
    return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}

// a register tile ((2, 2, N / 8), 1, 1) of wgmma's accumulator as (row half, column): a thread
// holds rows r and r + 8 of its warp's 16, two adjacent columns in each group of 8
template <class L> CUTE_HOST_DEVICE constexpr auto rowcol(L l) {
    return make_layout(get<0, 1>(l), make_layout(get<0, 0>(l), get<0, 2>(l)));
}

// which of a thread's two rows accumulator register i of a (64, N) tile is in (bit 3 of the
// row: a warp's 16 rows start on a multiple of 16)
CUTE_HOST_DEVICE constexpr int row_half(int i) {
    return i / 2 % 2;
}

} // namespace attn90
