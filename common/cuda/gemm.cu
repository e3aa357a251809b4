// gemm.cu — matrix multiplication with cuBLAS, the op that holds almost all of a transformer's FLOPs.
//
// Playbook: "First steps: training on one GPU" (6·N FLOPs per token are GEMMs) and the kernels chapter
// (10_kernels climbs from a naive GEMM to tensor cores and is benchmarked against this call).
// cuBLAS is column-major, our tensors are row-major. A row-major (M, N) matrix read column-major is its
// transpose, so C = op(A) @ op(B) is computed as C^T = op(B)^T @ op(A)^T: pass B first, A second, and swap
// M and N — no data is moved.
// TF32 only when the precision policy allows it (Tf32Scope, ops.hpp: the model opens one per pass with
// its policy's tf32): each call names its compute type, CUBLAS_COMPUTE_32F (fp32 FMA, matching the CPU
// reference to fp32 tolerance) or CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores, inputs rounded to 10
// mantissa bits, sums in fp32).
// Tested by tests/00_common/test_cuda.cpp (`build/bin/tests_00 -tc='*cuda*matmul*'` on a machine with a GPU).
#include <climits>

#include "cuda_util.cuh"

namespace penta::cuda {

cublasHandle_t cublas_handle() {
    static cublasHandle_t handle = [] {
        cublasHandle_t h = nullptr;
        CUBLAS_CHECK(cublasCreate(&h));
        CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));  // each call names its compute type
        return h;
    }();
    return handle;
}

static int as_int(int64_t v, const char* what) {
    CHECK(v >= 0 && v <= INT_MAX, "matmul: %s = %ld does not fit cuBLAS's 32-bit int", what, (long)v);
    return (int)v;
}

void gemm_rm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
             int64_t lda, int64_t sA, const float* B, int64_t ldb, int64_t sB, float beta, float* C,
             int64_t ldc, int64_t sC, int64_t batch, bool tf32) {
    if (M == 0 || N == 0 || batch == 0) return;
    // with K == 0 nothing is read, but cuBLAS still wants leading dimensions >= 1
    lda = std::max<int64_t>(lda, 1);
    ldb = std::max<int64_t>(ldb, 1);
    // column-major view: C^T (N, M) = op(B)^T (N, K) @ op(A)^T (K, M)
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        cublas_handle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(N, "N"),
        as_int(M, "M"), as_int(K, "K"), &alpha, B, CUDA_R_32F, as_int(ldb, "ldb"), sB, A, CUDA_R_32F,
        as_int(lda, "lda"), sA, &beta, C, CUDA_R_32F, as_int(ldc, "ldc"), sC, as_int(batch, "batch"),
        tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void matmul(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float alpha, float beta) {
    const int64_t M = C.size(-2), N = C.size(-1), K = transA ? A.size(-2) : A.size(-1);
    const int64_t batch = C.numel() / std::max<int64_t>(M * N, 1);
    const bool sharedB = B.dim() == 2;  // one weight matrix for every batch entry
    gemm_rm(transA, transB, M, N, K, alpha, A.ptr<float>(), A.size(-1), M * K, B.ptr<float>(), B.size(-1),
            sharedB ? 0 : K * N, beta, C.ptr<float>(), N, M * N, batch, Tf32Scope::allowed());
}

}  // namespace penta::cuda
