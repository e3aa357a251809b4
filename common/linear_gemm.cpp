// linear_gemm.cpp — see linear_gemm.hpp: the linear layers' GEMM in f32 (plain matmul), bf16 or f16 (emulated on
// the CPU, cuBLASLt on a GPU), and the table of low-precision formats through which chapter 11 adds fp8.
// Playbook: "Mixed precision training". Test: `make test CH=01`, `make test CH=11`.
#include "linear_gemm.hpp"

#include <cfloat>
#include <map>

namespace penta {

namespace {

DType g_format = DType::f32;  // one thread launches every op of a rank

// what a bf16 / f16 tensor core reads: each input rounded once to the format; the products summed in f32
void half_gemm(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float beta, DType format,
               Operand, Operand) {
    if (A.device() == Device::cuda) {
#if defined(PENTA_CUDA)
        return cuda::half_gemm(A, B, C, transA, transB, beta, format);
#else
        FAIL("--precision %s on a cuda tensor, but this build has no CUDA (make CUDA=1)", dtype_name(format));
#endif
    }
    Tensor a = Tensor::empty(A.shape, DType::f32, Device::cpu, Tag::workspace);
    Tensor b = Tensor::empty(B.shape, DType::f32, Device::cpu, Tag::workspace);
    const float *as = A.ptr<float>(), *bs = B.ptr<float>();
    float *ad = a.ptr<float>(), *bd = b.ptr<float>();
    for (int64_t i = 0, n = A.numel(); i < n; i++) ad[i] = round_to(as[i], format);
    for (int64_t i = 0, n = B.numel(); i < n; i++) bd[i] = round_to(bs[i], format);
    matmul(a, b, C, transA, transB, 1.0f, beta);
}

std::map<DType, FormatGemm>& gemms() {
    static std::map<DType, FormatGemm> table{{DType::bf16, half_gemm}, {DType::f16, half_gemm}};
    return table;
}

}  // namespace

GemmScope::GemmScope(DType format) : previous_(g_format) { g_format = format; }
GemmScope::~GemmScope() { g_format = previous_; }
DType GemmScope::format() { return g_format; }

void install_linear_gemm(DType format, FormatGemm gemm) { gemms()[format] = gemm; }

float round_to(float x, DType format) {
    switch (format) {
        case DType::f32: return x;
        case DType::bf16: return bf16_to_f32(f32_to_bf16(x));
        case DType::f16: return f16_to_f32(f32_to_f16(x));
        case DType::e4m3: return e4m3_to_f32(f32_to_e4m3(x, true));
        case DType::e5m2: return e5m2_to_f32(f32_to_e5m2(x, true));
        default: FAIL("round_to: %s is not a float format", dtype_name(format));
    }
}

float max_finite(DType format) {
    switch (format) {
        case DType::f32: return FLT_MAX;
        case DType::bf16: return bf16_to_f32(0x7F7F);
        case DType::f16: return f16_to_f32(0x7BFF);
        case DType::e4m3: return e4m3_to_f32(0x7E);
        case DType::e5m2: return e5m2_to_f32(0x7B);
        default: FAIL("max_finite: %s is not a float format", dtype_name(format));
    }
}

void linear_gemm(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float beta, Operand a_role,
                 Operand b_role) {
    count_linear_flops(C.size(-2), C.size(-1), transA ? A.size(-2) : A.size(-1));  // the op-level FLOP counter
    const DType f = GemmScope::format();
    if (f == DType::f32) return matmul(A, B, C, transA, transB, 1.0f, beta);  // plain sgemm, batched shapes too
    const auto it = gemms().find(f);
    CHECK(it != gemms().end(), "--precision: GEMMs in %s are chapter 11's (11_mixed_precision/fp8.hpp), and this "
          "program does not install them: build/bin/11_mixed_precision trains under them", dtype_name(f));
    CHECK(A.dim() == 2 && B.dim() == 2 && C.dim() == 2 && A.dtype == DType::f32 && B.dtype == DType::f32 &&
              C.dtype == DType::f32,
          "linear_gemm: the linear layers' GEMMs are 2-D f32 (got A %s, B %s)", shape_str(A.shape).c_str(),
          shape_str(B.shape).c_str());
    const int64_t M = C.size(0), N = C.size(1), K = transA ? A.size(0) : A.size(1);
    CHECK((transA ? A.size(1) : A.size(0)) == M && (transB ? B.size(1) : B.size(0)) == K &&
              (transB ? B.size(0) : B.size(1)) == N,
          "linear_gemm: shapes A %s%s, B %s%s, C %s do not fit", shape_str(A.shape).c_str(), transA ? "^T" : "",
          shape_str(B.shape).c_str(), transB ? "^T" : "", shape_str(C.shape).c_str());
    CHECK(A.device() == B.device() && B.device() == C.device(), "linear_gemm: A, B and C must be on one device");
    CHECK(a_role != Operand::weight, "linear_gemm: the left operand is a weight; fp8 tiles it 1x128 (activations, "
          "gradients) and only the right operand by 128x128 blocks");
    it->second(A, B, C, transA, transB, beta, f, a_role, b_role);
}

}  // namespace penta
