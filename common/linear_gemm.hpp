// linear_gemm.hpp — the one GEMM every linear layer calls, in the format the precision policy names: f32 (plain
// matmul), bf16 or f16 (each input rounded to the format, the products summed in f32: what a tensor core reads
// and how it accumulates), or a format a later chapter installs (chapter 11's fp8 with per-tile scales).
//
// Playbook: "Mixed precision training" — the matmuls are where low precision pays: tensor cores read bf16, f16
// or fp8 inputs and accumulate in f32, while the weights' master copy and the optimizer stay f32.
// Why it sits in common/: every layout of chapters 01-09 trains with `--precision bf16` (bf16 weights and GEMMs,
// an f32 master), so the GEMM's format is chosen below every chapter. The rest of chapter 11's concept is its
// own: fp16's loss scaler (11_mixed_precision/loss_scaler.hpp) and fp8's tile quantisation and GEMM
// (11_mixed_precision/fp8.hpp), which install themselves here (install_linear_gemm).
// On the CPU every format is emulated exactly; on a GPU bf16 / f16 run through cuBLASLt (common/cuda/linear_gemm.cu).
// Test: `make test CH=01` (bf16), `make test CH=11` (every format; -tc='*cuda*' on a machine with a GPU).
#pragma once
#include <cstdint>

#include "ops.hpp"

namespace penta {

// While one is alive, the linear layers' GEMMs read their inputs in `format` (f32: plain matmul; bf16, f16;
// e4m3: fp8, once chapter 11 installed it). The model opens one around each pass from its precision policy.
class GemmScope {
   public:
    explicit GemmScope(DType format);
    ~GemmScope();
    GemmScope(const GemmScope&) = delete;
    GemmScope& operator=(const GemmScope&) = delete;
    static DType format();

   private:
    DType previous_;
};

// What a GEMM operand is. fp8 reads it: gradients in e5m2, the rest in e4m3; a weight by 128x128 blocks.
enum class Operand : uint8_t { activation, weight, gradient };

// C = op(A) @ op(B) + beta * C (ops.hpp's matmul) of 2-D f32 tensors on one device, in the current GemmScope's
// format, for operands of the given roles (a_role is never a weight). f32: exactly matmul. The linear layers
// call nothing else.
void linear_gemm(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float beta, Operand a_role,
                 Operand b_role);

// One low-precision format's GEMM, called with the shapes checked. common/ has bf16 / f16; chapter 11 adds e4m3
// (fp8). f32 is no entry: it is plain matmul.
using FormatGemm = void (*)(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float beta,
                            DType format, Operand a_role, Operand b_role);
void install_linear_gemm(DType format, FormatGemm gemm);

// The exact value the format keeps of x: bf16 and f16 round to nearest even and overflow to ±inf (f16's
// overflow is what loss scaling watches for); e4m3 / e5m2 saturate at ±max (the scaled fp8 convention).
float round_to(float x, DType format);
float max_finite(DType format);  // 3.39e38 (bf16), 65504, 448 (e4m3), 57344 (e5m2)

namespace cuda {  // common/cuda/linear_gemm.cu (CUDA builds)
// bf16 / f16: both inputs converted on the device (round to nearest even), cuBLASLt sums the products in f32
void half_gemm(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float beta, DType format);
}  // namespace cuda

}  // namespace penta
