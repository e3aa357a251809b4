// mma_sm80.cuh — the tensor-core building blocks of sm_80 (Ampere, and Hopper's compatibility path) that the
// mma.sync GEMM rung and flash attention share: asynchronous global->shared copies (cp.async), shared->register
// fragment loads (ldmatrix) and the warp-wide matrix multiply-accumulate mma.sync.m16n8k16 (bf16 in, f32 out).
//
// Playbook: "Diving into the GPUs" (tensor cores, and the software pipeline that keeps them fed).
// The fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane l of a warp, g = l / 4, c = l % 4:
//   A (16 x 16, row-major) a[0..3], each two bf16: a0 = A[g][2c..2c+1], a1 = A[g+8][2c..], a2 = A[g][2c+8..],
//                                                  a3 = A[g+8][2c+8..]
//   B (16 x 8, "col": B[k][n] with k fastest) b[0..1]: b0 = B[2c..2c+1][g], b1 = B[2c+8..2c+9][g]
//   C (16 x 8, f32) c[0..3]: c0,c1 = C[g][2c..2c+1], c2,c3 = C[g+8][2c..2c+1]
// ldmatrix.x4 loads four 8x8 bf16 matrices, one per group of 8 lanes: lane l gives the address of row l % 8
// of matrix l / 8, and lane l receives, of each matrix, row l / 4, elements 2(l % 4), +1 — exactly the
// fragment layout above when the matrices are chosen right; .trans delivers the transpose, so a row-major
// (k, n) tile of B, or a P stored (query, key) read as P^T, comes out in B's (or A's) layout.
// C's layout of two neighbouring n8 tiles, rounded to bf16 pairs, IS A's layout of a 16 x 16 tile: flash
// attention feeds its probabilities from registers straight into the next product.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace penta::lab::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared, bypassing L1 (.cg); src_bytes < 16 zero-fills the rest (0: all zeros, the
// padding of a tile that hangs over the matrix's edge; `src` must still be a valid address)
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes = 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// wait until at most N committed groups are still in flight
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// c (16 x 8, f32) += a (16 x 16, bf16) @ b (16 x 8, bf16)
__device__ __forceinline__ void mma_bf16_16816(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// two floats -> one register of two bf16 (the first in the low half, as the fragments want)
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// rows x D bf16 of global memory (`stride` elements between rows) -> a shared tile with rows of `ld`
// elements, in 16-byte cp.async pieces spread over the block's `threads` threads (D a multiple of 8)
template <int D>
__device__ __forceinline__ void load_rows_async(__nv_bfloat16* s, int ld, const __nv_bfloat16* g, int64_t stride,
                                                int rows, int tid, int threads) {
    constexpr int PIECES = D / 8;
    for (int c = tid; c < rows * PIECES; c += threads) {
        const int r = c / PIECES, col = (c % PIECES) * 8;
        cp_async16(s + r * ld + col, g + r * stride + col);
    }
}

// ldmatrix lane addressing for a tile stored row-major in shared memory with `ld` elements per row:
//   A operand (16 x 16 at (r0, c0)), non-transposed: lane l -> row r0 + l % 16, column c0 + (l / 16)·8,
//     giving a0..a3 in order;
//   B operand from an (n, k) tile (K-major: the weight of a linear layer, K of attention), two n8 tiles
//     at (n0, k0): lane l -> row n0 + (l % 8) + (l / 16)·8, column k0 + ((l / 8) % 2)·8, giving b0, b1 of the
//     first n8 tile then b0, b1 of the second;
//   B operand from a (k, n) tile (N-major: V of attention) with .trans, two n8 tiles at (k0, n0): lane l ->
//     row k0 + (l % 8) + ((l / 8) % 2)·8, column n0 + (l / 16)·8, same register order;
//   A operand read transposed from a (k, m) tile (P stored (query, key) read as P^T, rows = keys) with
//     .trans, at (k0, m0): lane l -> row k0 + (l % 8) + (l / 16)·8, column m0 + ((l / 8) % 2)·8, giving
//     a0..a3.
__device__ __forceinline__ const __nv_bfloat16* a_frag_addr(const __nv_bfloat16* tile, int ld, int r0, int c0, int lane) {
    return tile + (r0 + (lane & 15)) * ld + c0 + (lane >> 4) * 8;
}
__device__ __forceinline__ const __nv_bfloat16* b_frag_addr_nk(const __nv_bfloat16* tile, int ld, int n0, int k0, int lane) {
    return tile + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8;
}
__device__ __forceinline__ const __nv_bfloat16* b_frag_addr_kn(const __nv_bfloat16* tile, int ld, int k0, int n0, int lane) {
    return tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8;
}

__device__ __forceinline__ const __nv_bfloat16* at_frag_addr_km(const __nv_bfloat16* tile, int ld, int k0, int m0, int lane) {
    return tile + (k0 + (lane & 7) + (lane >> 4) * 8) * ld + m0 + ((lane >> 3) & 1) * 8;
}

}  // namespace penta::lab::cuda
