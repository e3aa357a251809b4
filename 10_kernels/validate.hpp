// validate.hpp — how the kernels lab decides that a kernel is right: its output against an fp64 reference
// computed on the CPU from the same (already rounded) inputs, with an error bound stated per dtype and op.
//
// Playbook: "Diving into the GPUs" — a fast kernel is only worth timing once it computes the same function.
// Two measures, both must pass:
//   rel_fro  ||out - ref|| / ||ref|| over all compared elements (the overall accuracy);
//   elementwise  |out_i - ref_i| <= el_rel·|ref_i| + el_abs·rms(ref) for every i, which a single wrong
//            element or row cannot hide from (the Frobenius ratio of one bad element in 16M is tiny);
// and no element may be NaN or infinite: outputs are poisoned with NaN before each run, so an element a
// kernel never wrote fails too. The bounds (kBounds) say where each comes from.
//   build/bin/tests_10 -tc='*validation*'
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace penta::lab {

enum class Check : uint8_t {
    gemm_f32,        // f32 in, f32 products and sums, f32 out
    gemm_bf16,       // bf16 in, f32 accumulate, bf16 out
    f32_sum,         // an f32 result of long f32 sums (a norm's weight gradient, a loss, an lse)
    pointwise_bf16,  // bf16 in and out, f32 math inside (RMSNorm, RoPE, SwiGLU, dlogits)
    adamw_f32,       // the f32 optimizer state and weights after one step
    adamw_step,      // the step p' - p itself (cancellation: |p|·2^-24 of it is rounding of p)
    attention_bf16,  // bf16 q, k, v, out, probabilities rounded to bf16 before P·V (and dS in backward)
};

struct Bound {
    Check check;
    const char* name;
    double rel_fro, el_rel, el_abs;
    const char* why;
};
const Bound& bound_of(Check c);
const std::vector<Bound>& bounds();  // every bound, for the README's table (`10_kernels --bounds`)

struct ErrorReport {
    double rel_fro = 0, worst_el = 0;  // worst_el: max over i of |out_i - ref_i| / (el_rel·|ref_i| + el_abs·rms)
    int64_t n = 0, nonfinite = 0, worst_index = -1;
    double worst_out = 0, worst_ref = 0;
    bool ok = false;
    std::string str() const;  // "rel 1.2e-03 (bound 4e-03), worst element 0.31 of its bound at 17: ... ok"
};

// out (n) against ref (n); `Check` names the bound
ErrorReport compare(const float* out, const double* ref, int64_t n, Check c);
ErrorReport compare(const std::vector<float>& out, const std::vector<double>& ref, Check c);

// bf16 rounding of host values (round to nearest even, as the GPU's __float2bfloat16_rn), so references see
// exactly the values a bf16 kernel reads
std::vector<float> round_bf16(const std::vector<float>& x);
std::vector<uint16_t> to_bf16_bits(const std::vector<float>& x);
std::vector<float> from_bf16_bits(const std::vector<uint16_t>& x);

// std·N(0,1) values from the counter RNG (seed), fresh per check: a kernel must compute the same function on
// any valid input, and zeros would hide unwritten outputs and wrong indexing
std::vector<float> random_normal(int64_t n, uint64_t seed, float std = 1.0f);

}  // namespace penta::lab
