// lt_matmul.cuh — one cuBLASLt GEMM with f32 compute and an f32 result, its plan cached per shape: what the
// linear layers' low-precision GEMMs share (common/cuda/linear_gemm.cu: bf16 / f16; chapter 11's
// 11_mixed_precision/cuda/fp8_gemm.cu: fp8 with block scales).
// Playbook: "Mixed precision training". Test: tests/11_mixed_precision/test_cuda.cpp (on a GPU).
#pragma once
#include <cublasLt.h>

#include <cstdint>
#include <tuple>

// cuBLASLt's block scales for FP8 (the scale modes VEC128_32F and BLK128x128_32F) came with cuBLAS 12.9: an older
// toolkit still builds the library (bf16 / f16 and everything else), and --precision fp8 on its GPU says why not
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120900
#define PENTA_LT_BLOCK_SCALES 1
#else
#define PENTA_LT_BLOCK_SCALES 0
#endif

namespace penta::cuda {

// One cuBLASLt GEMM in its column-major terms: D (m, n) = op(A) (m, k) @ op(B) (k, n) + beta * D, f32 compute
// and f32 D. fp8 operands carry a scale mode each (a cublasLtMatmulMatrixScale_t; -1: no scales). d_align: the
// bytes D's address is a multiple of (a view into a larger tensor may start anywhere; A and B are fresh blocks).
struct LtShape {
    cudaDataType_t a_type, b_type;
    bool trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldd;
    int32_t a_scale_mode = -1, b_scale_mode = -1;
    uint32_t d_align = 256;
    auto key() const {
        return std::make_tuple((int)a_type, (int)b_type, trans_a, trans_b, m, n, k, lda, ldb, ldd, a_scale_mode,
                               b_scale_mode, d_align);
    }
};

// the largest power of two (256 at most, 4 at least) that p's address is a multiple of
uint32_t alignment_of(const void* p);

// D = op(A) @ op(B) + beta * D in s's terms. scales: device pointers to the operands' fp8 scale tensors
// (nullptr: none), set on the plan's descriptor per call
void lt_matmul(const LtShape& s, const void* A, const float* a_scale, const void* B, const float* b_scale, float beta,
               float* D);

}  // namespace penta::cuda
