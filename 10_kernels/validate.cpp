// validate.cpp — the error measures and the bounds of validate.hpp.
//
// Playbook: "Diving into the GPUs". Where each bound comes from (u = 2^-24, f32's unit roundoff; bf16 keeps
// 8 significant bits, so rounding to it moves a value by at most 2^-8 = 3.9e-3 of itself, 1.1e-3 rms):
//   build/bin/10_kernels --bounds          (prints this table)
#include "validate.hpp"

#include <algorithm>
#include <cmath>

#include "../common/core.hpp"
#include "reference.hpp"

namespace penta::lab {

const std::vector<Bound>& bounds() {
    static const std::vector<Bound> b = {
        {Check::gemm_f32, "gemm f32", 1e-5, 1e-5, 1e-4,
         "f32 sums of K products drift ~sqrt(K)·u: 5e-6 at K = 8192 in one chain, less when blocked"},
        {Check::gemm_bf16, "gemm bf16", 4e-3, 4e-3, 1e-4,
         "rounding the f32 result to bf16: <= 2^-8 of each element (1.1e-3 rms); the f32 sum adds ~1e-6"},
        {Check::f32_sum, "f32 sum", 2e-5, 1e-4, 1e-4,
         "an f32 result of up to ~1e5 terms summed in f32 in any order: ~sqrt(n)·u ~ 5e-6"},
        {Check::pointwise_bf16, "pointwise bf16", 4e-3, 5e-3, 1e-3,
         "bf16 output rounding (2^-8) on an f32 result good to ~1e-6; RoPE's f32 angle pos·f adds pos·u (2.4e-4 at 4096)"},
        {Check::adamw_f32, "adamw f32", 1e-5, 1e-5, 1e-6, "a few f32 operations per element: ~4u relative"},
        {Check::adamw_step, "adamw step", 2e-4, 2e-3, 1e-4,
         "p' - p loses |p|·u to cancellation, ~6e-5 of a step of lr = 1e-3 relative size"},
        {Check::attention_bf16, "attention bf16", 1e-2, 2e-2, 1e-2,
         "probabilities (and dS) rounded to bf16 before their matrix products, outputs rounded to bf16"},
    };
    return b;
}

const Bound& bound_of(Check c) {
    for (const auto& b : bounds())
        if (b.check == c) return b;
    FAIL("unknown check %d", (int)c);
}

std::string ErrorReport::str() const {
    if (n == 0) return "nothing compared";
    std::string s = strfmt("rel %.2e, worst element at %.2f of its bound", rel_fro, worst_el);
    if (worst_index >= 0) s += strfmt(" (index %ld: %.6g vs %.6g)", (long)worst_index, worst_out, worst_ref);
    if (nonfinite) s += strfmt(", %ld non-finite", (long)nonfinite);
    return s + (ok ? ": ok" : ": FAILED");
}

ErrorReport compare(const float* out, const double* ref, int64_t n, Check c) {
    // EXERCISE 10.2 begin: the error measure: relative Frobenius error and each element's share of its bound, non-finite values counted
    const Bound& b = bound_of(c);
    ErrorReport r;
    r.n = n;
    double diff2 = 0, ref2 = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!std::isfinite(out[i]) || !std::isfinite(ref[i])) {
            if (r.nonfinite++ == 0) r.worst_index = i, r.worst_out = out[i], r.worst_ref = ref[i];
            continue;
        }
        diff2 += (out[i] - ref[i]) * (out[i] - ref[i]);
        ref2 += ref[i] * ref[i];
    }
    const double rms = n > 0 ? std::sqrt(ref2 / (double)n) : 0;
    r.rel_fro = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    if (r.nonfinite == 0) {
        for (int64_t i = 0; i < n; i++) {
            const double allowed = b.el_rel * std::fabs(ref[i]) + b.el_abs * rms;
            const double e = std::fabs(out[i] - ref[i]);
            const double share = allowed > 0 ? e / allowed : (e > 0 ? INFINITY : 0);
            if (share > r.worst_el || r.worst_index < 0) r.worst_el = share, r.worst_index = i, r.worst_out = out[i], r.worst_ref = ref[i];
        }
    }
    r.ok = n > 0 && r.nonfinite == 0 && r.rel_fro <= b.rel_fro && r.worst_el <= 1.0;
    return r;
    // EXERCISE 10.2 end
}

ErrorReport compare(const std::vector<float>& out, const std::vector<double>& ref, Check c) {
    CHECK(out.size() == ref.size(), "compare: %zu outputs against %zu reference values", out.size(), ref.size());
    return compare(out.data(), ref.data(), (int64_t)out.size(), c);
}

std::vector<float> round_bf16(const std::vector<float>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
    return r;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& x) {
    std::vector<uint16_t> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = f32_to_bf16(x[i]);
    return r;
}

std::vector<float> from_bf16_bits(const std::vector<uint16_t>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = bf16_to_f32(x[i]);
    return r;
}

std::vector<float> random_normal(int64_t n, uint64_t seed, float std) {
    std::vector<float> r((size_t)n);
    constexpr int64_t kPiece = 1 << 20;  // a GPU check at 8192^2 draws 67M values: spread over the cores
    parallel_for((n + kPiece - 1) / kPiece, [&](int64_t p) {
        for (int64_t i = p * kPiece; i < std::min(n, (p + 1) * kPiece); i++)
            r[(size_t)i] = std * rng_normal(seed, 0x10ab, (uint64_t)i);
    });
    return r;
}

}  // namespace penta::lab
