// reference.hpp — the kernels lab's fp64 references: every op of the lab computed in double on the CPU from
// the same inputs the kernel read (bf16 inputs already rounded), the yardstick of validate.hpp.
//
// Playbook: "Diving into the GPUs" (GEMM, fused ops, flash attention). Written for clarity, not speed, but
// spread over the CPU's cores (std::thread), because a GPU check at 8192^3 needs rows of a large product.
// Conventions: row-major; attention tensors (B, T, H, D) as the trainer's (common/ops.hpp); RoPE in the
// Hugging Face rotate_half convention (element i pairs with i + D/2).
// Tested against the trainer's own CPU ops and by finite differences: tests/10_kernels/test_reference.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace penta::lab {

// fn(i) for i in [0, n), split over the hardware threads (the calls must be independent)
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

// ---- GEMM ----------------------------------------------------------------------------------------------
// C = A @ B with A (M, K); B (K, N), or B stored transposed as (N, K) when b_nk (the linear layer's W).
// Only the rows `rows` of C, returned one after the other (rows.size() x N); every row when rows is empty.
std::vector<double> gemm_ref(const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool b_nk,
                             const std::vector<int64_t>& rows = {});

// ---- fused ops ----------------------------------------------------------------------------------------
// y = x / sqrt(mean(x^2) + eps) * w; x, y (N, h); rstd (N)
void rmsnorm_fwd_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t N, int64_t h, double eps,
                     std::vector<double>& y, std::vector<double>& rstd);
// dx (N, h); dw (h) summed over the rows
void rmsnorm_bwd_ref(const std::vector<float>& dy, const std::vector<float>& x, const std::vector<float>& w,
                     int64_t N, int64_t h, double eps, std::vector<double>& dx, std::vector<double>& dw);

// x (B, T, H, D) rotated by pos[t]·theta^(-2i/D) (inverse: by minus that, the backward)
std::vector<double> rope_ref(const std::vector<float>& x, const std::vector<int32_t>& pos, int64_t B, int64_t T,
                             int64_t H, int64_t D, double theta, bool inverse);

// out = silu(g)·u; dg, du from dout
std::vector<double> swiglu_fwd_ref(const std::vector<float>& g, const std::vector<float>& u);
void swiglu_bwd_ref(const std::vector<float>& dout, const std::vector<float>& g, const std::vector<float>& u,
                    std::vector<double>& dg, std::vector<double>& du);

// per-row loss = logsumexp(logits) - logits[target] (0 for target < 0) and dlogits = (softmax - onehot)·scale
// (zero rows for target < 0); logits (N, V)
void cross_entropy_ref(const std::vector<float>& logits, const std::vector<int32_t>& targets, int64_t N,
                       int64_t V, double scale, std::vector<double>& loss, std::vector<double>& dlogits);

// PyTorch AdamW on one tensor, in double from the f32 inputs; step counts from 1
struct AdamWRef {
    double lr, beta1, beta2, eps, weight_decay;
};
void adamw_ref(const std::vector<float>& p, const std::vector<float>& g, const std::vector<float>& m,
               const std::vector<float>& v, const AdamWRef& cfg, int step, std::vector<double>& p_out,
               std::vector<double>& m_out, std::vector<double>& v_out);

// ---- attention ----------------------------------------------------------------------------------------
// Causal attention with GQA: q, out (B, T, H, D); k, v (B, T, Hkv, D); head h uses kv head h / (H / Hkv);
// scale 1/sqrt(D). One kv group at a time (batch b, kv head kvh, and its H/Hkv query heads), so a check of
// a long sequence computes one group, not the whole tensor.
struct AttnShape {
    int64_t B, T, H, Hkv, D;
};
struct AttnGroupRef {
    std::vector<double> out, dq;  // (H/Hkv, T, D): the group's query heads, in order
    std::vector<double> lse;      // (H/Hkv, T), natural log
    std::vector<double> dk, dv;   // (T, D)
};
// dout may be empty: forward only
AttnGroupRef attention_ref(const AttnShape& s, const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, const std::vector<float>& dout, int64_t b, int64_t kvh);
// the same slices of a (B, T, H, D) / (B, T, Hkv, D) / (B, H, T) tensor, in AttnGroupRef's order
std::vector<float> group_rows(const std::vector<float>& x, const AttnShape& s, int64_t heads, int64_t b, int64_t h0,
                              int64_t nh);
std::vector<float> group_lse(const std::vector<float>& lse, const AttnShape& s, int64_t b, int64_t kvh);

}  // namespace penta::lab
