// precision_setup.cpp — what chapter 11's tests add before any test runs: the fp8 GEMM installed as the linear
// layers' e4m3 GEMM (11_mixed_precision/fp8.hpp), and fp16's LossScaler as the step hook the shared training
// helpers add for a policy with loss scaling (tests/01_single_gpu/equivalence.hpp's precision_hooks).
// Playbook: "Mixed precision training". Run: `make test CH=11`.
#include "../../11_mixed_precision/fp8.hpp"
#include "../../11_mixed_precision/loss_scaler.hpp"
#include "../01_single_gpu/equivalence.hpp"

namespace penta::testing {

namespace {

const bool installed = [] {
    install_fp8_gemm();
    precision_hooks() = [](const Precision& p) -> std::unique_ptr<StepHooks> {
        return p.loss_scaling ? std::make_unique<LossScaler>() : nullptr;
    };
    return true;
}();

}  // namespace

}  // namespace penta::testing
