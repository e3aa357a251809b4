// precision.cpp — the precision policy's checks and its one-line description (precision.hpp).
// Playbook: "Mixed precision training". Test: `make test CH=01`.
#include "precision.hpp"

namespace penta {

std::string Precision::str() const {
    return strfmt("param %s, grad %s, act %s, comm %s%s%s", dtype_name(param), dtype_name(grad), dtype_name(act),
                  dtype_name(comm), fp32_master ? ", fp32 master" : "", tf32 ? ", tf32" : "");
}

void Precision::validate() const {
    CHECK(param == DType::f32 || param == DType::bf16 || param == DType::f16,
          "precision: parameters in %s: they must be f32, bf16 or f16 (fp8 weights keep a higher-precision copy: "
          "chapter 11)", dtype_name(param));
    CHECK(param == DType::f32 || fp32_master,
          "precision: %s parameters need fp32 master weights (fp32_master): AdamW's small updates vanish in a "
          "%s mantissa", dtype_name(param), dtype_name(param));
    // the kernels compute in f32 until chapter 11 brings the low-precision ones
    CHECK(act == DType::f32, "precision: activations in %s: the compute kernels take f32 until chapter 11",
          dtype_name(act));
    CHECK(grad == DType::f32, "precision: gradients in %s: gradients accumulate in f32 (chapter 11 keeps it so)",
          dtype_name(grad));
    CHECK(comm == grad, "precision: gradient communication in %s with %s gradients: reducing in another dtype "
          "arrives with chapter 11", dtype_name(comm), dtype_name(grad));
}

}  // namespace penta
