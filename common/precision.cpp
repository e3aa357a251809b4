// precision.cpp — the precision policy's checks and its one-line description (precision.hpp).
// Playbook: "Mixed precision training". Test: `make test CH=01`, `make test CH=11`.
#include "precision.hpp"

namespace penta {

Precision Precision::named(const std::string& name) {
    Precision p;
    if (name == "fp32") return p;
    p.fp32_master = true;
    if (name == "bf16") p.param = p.gemm = DType::bf16;
    else if (name == "fp16") p.param = p.gemm = DType::f16, p.loss_scaling = true;
    // fp8 weights would need their scales kept with them; the weights stay bf16 and each GEMM quantises
    else if (name == "fp8") p.param = DType::bf16, p.gemm = DType::e4m3;
    else FAIL("--precision %s: it must be fp32, bf16, fp16 or fp8", name.c_str());
    return p;
}

std::string Precision::str() const {
    return strfmt("param %s, grad %s, act %s, comm %s%s%s%s%s", dtype_name(param), dtype_name(grad), dtype_name(act),
                  dtype_name(comm), fp32_master ? ", fp32 master" : "", tf32 ? ", tf32" : "",
                  gemm == DType::f32 ? "" : strfmt(", gemm %s", gemm == DType::e4m3 ? "fp8" : dtype_name(gemm)).c_str(),
                  loss_scaling ? ", loss scaling" : "");
}

void Precision::validate() const {
    CHECK(param == DType::f32 || param == DType::bf16 || param == DType::f16,
          "precision: parameters in %s: they must be f32, bf16 or f16 (fp8 weights keep a higher-precision copy: "
          "chapter 11)", dtype_name(param));
    CHECK(param == DType::f32 || fp32_master,
          "precision: %s parameters need fp32 master weights (fp32_master): AdamW's small updates vanish in a "
          "%s mantissa", dtype_name(param), dtype_name(param));
    // the low precision lives in the GEMMs' inputs (gemm); the kernels store and take f32
    CHECK(act == DType::f32, "precision: activations in %s: the compute kernels take f32 (low-precision compute "
          "is the GEMM format, gemm)", dtype_name(act));
    CHECK(gemm == DType::f32 || gemm == DType::bf16 || gemm == DType::f16 || gemm == DType::e4m3,
          "precision: GEMM format %s: it must be f32, bf16, f16 or e4m3 (fp8: e4m3 forward, e5m2 gradients)",
          dtype_name(gemm));
    CHECK(grad == DType::f32, "precision: gradients in %s: gradients accumulate in f32 (chapter 11 keeps it so)",
          dtype_name(grad));
    CHECK(comm == grad, "precision: gradient communication in %s with %s gradients: the reductions use the "
          "gradients' dtype (f32 accumulation, f32 reduction)", dtype_name(comm), dtype_name(grad));
}

}  // namespace penta
