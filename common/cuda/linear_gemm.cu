// linear_gemm.cu — the linear layers' bf16 / f16 GEMMs on the GPU (linear_gemm.hpp): both inputs converted on the
// device, cuBLASLt sums the products in f32 and writes f32, as the CPU emulation does; and the cuBLASLt plumbing
// (lt_matmul.cuh) that chapter 11's fp8 GEMM uses too (11_mixed_precision/cuda/fp8_gemm.cu).
//
// Playbook: "Mixed precision training" — tensor cores read low-precision inputs and accumulate in f32.
// The inputs are converted by elementwise.cu's convert (round to nearest even, bit for bit the host's).
// Tested by tests/11_mixed_precision/test_cuda.cpp against the CPU emulation (`build/bin/tests_11 -tc='*cuda*'`
// on a machine with a GPU; scripts/gpu_check.sh runs it).
#include <cublasLt.h>

#include <map>
#include <tuple>

#include "../linear_gemm.hpp"
#include "cuda_util.cuh"
#include "lt_matmul.cuh"

namespace penta::cuda {

namespace {

cublasLtHandle_t lt_handle() {
    static cublasLtHandle_t handle = [] {
        cublasLtHandle_t h = nullptr;
        CUBLAS_CHECK(cublasLtCreate(&h));
        return h;
    }();
    return handle;
}

// the descriptors and the heuristic's first algorithm, made once per shape (a training step repeats a few)
struct LtPlan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};
constexpr size_t kLtWorkspace = 32u << 20;

LtPlan& lt_plan(const LtShape& s) {
    static std::map<decltype(s.key()), LtPlan> plans;
    auto it = plans.find(s.key());
    if (it != plans.end()) return it->second;
    LtPlan p;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
#if PENTA_LT_BLOCK_SCALES
    if (s.a_scale_mode >= 0) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &s.a_scale_mode,
                                                    sizeof s.a_scale_mode));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &s.b_scale_mode,
                                                    sizeof s.b_scale_mode));
    }
#endif
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, s.a_type, s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k, s.lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, s.b_type, s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n, s.ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, s.m, s.n, s.ldd));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kLtWorkspace,
                                                      sizeof kLtWorkspace));
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &s.d_align, sizeof s.d_align));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_handle(), p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CHECK(found == 1, "cuBLASLt has no algorithm for a %s x %s GEMM (m %ld, n %ld, k %ld, scale modes %d / %d) on "
          "this GPU", s.a_type == CUDA_R_8F_E5M2 ? "e5m2" : s.a_type == CUDA_R_8F_E4M3 ? "e4m3" : "16-bit",
          s.b_type == CUDA_R_8F_E5M2 ? "e5m2" : s.b_type == CUDA_R_8F_E4M3 ? "e4m3" : "16-bit", (long)s.m, (long)s.n,
          (long)s.k, s.a_scale_mode, s.b_scale_mode);
    p.algo = result.algo;
    return plans.emplace(s.key(), p).first->second;
}

}  // namespace

uint32_t alignment_of(const void* p) {
    uint32_t a = 256;
    while (a > 4 && (uintptr_t)p % a) a /= 2;
    return a;
}

void lt_matmul(const LtShape& s, const void* A, const float* a_scale, const void* B, const float* b_scale, float beta,
               float* D) {
    LtPlan& p = lt_plan(s);
    if (a_scale) {
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
    }
    Tensor ws = workspace(kLtWorkspace);
    const float one = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt_handle(), p.op, &one, A, p.a, B, p.b, &beta, D, p.d, D, p.d, &p.algo, ws.data(),
                                kLtWorkspace, 0));
}

void half_gemm(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float beta, DType format) {
    Tensor a = Tensor::empty(A.shape, format, Device::cuda, Tag::workspace);
    Tensor b = Tensor::empty(B.shape, format, Device::cuda, Tag::workspace);
    cuda::convert(a, A);  // the value round_to keeps on the host, bit for bit
    cuda::convert(b, B);
    const int64_t M = C.size(0), N = C.size(1), K = transA ? A.size(0) : A.size(1);
    if (M == 0 || N == 0) return;
    const cudaDataType_t t = format == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    // column-major view, as gemm.cu: C^T (N, M) = op(B)^T (N, K) @ op(A)^T (K, M) — pass B first, A second
    LtShape s{t, t, transB, transA, N, M, K, std::max<int64_t>(B.size(1), 1), std::max<int64_t>(A.size(1), 1), N};
    s.d_align = alignment_of(C.data());
    lt_matmul(s, b.data(), nullptr, a.data(), nullptr, beta, C.ptr<float>());
}

}  // namespace penta::cuda
