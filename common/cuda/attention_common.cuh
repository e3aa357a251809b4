// attention_common.cuh — what the naive and the flash attention kernels share: the problem's sizes, the
// causal mask with global offsets, and FA2's row term D = rowsum(dO ∘ O).
//
// Playbook: "Flash attention" and "Context parallelism" (a query at global position q_offset + i may see a
// key at k_offset + j when causal allows it; CP calls attention on blocks of keys held by other ranks).
// Internal to common/cuda/. Tested through tests/00_common/test_cuda.cpp (`build/bin/tests_00 -tc='*cuda*attention*'`).
#pragma once
#include <cmath>

#include "cuda_util.cuh"

namespace penta::cuda {

// q (B, Tq, nh, hd); k, v (B, Tk, nkv, hd); lse and D (B, nh, Tq). Passed by value to kernels.
struct AttnDims {
    int64_t B, Tq, Tk, nh, nkv, hd;
    int64_t group;  // query heads per kv head (GQA): head h reads kv head h / group
    float scale;    // 1 / sqrt(hd)
    int64_t q_offset, k_offset;
    bool causal;
};

inline AttnDims attn_dims(const Tensor& q, const Tensor& k, const AttnSpan& span) {
    AttnDims a;
    a.B = q.size(0);
    a.Tq = q.size(1);
    a.nh = q.size(2);
    a.hd = q.size(3);
    a.Tk = k.size(1);
    a.nkv = k.size(2);
    a.group = a.nh / a.nkv;
    a.scale = 1.0f / sqrtf((float)a.hd);
    a.q_offset = span.q_offset;
    a.k_offset = span.k_offset;
    a.causal = span.causal;
    return a;
}

// may query i (local index) attend to key j (local index)?
__host__ __device__ __forceinline__ bool key_visible(const AttnDims& a, int64_t i, int64_t j) {
    return !a.causal || a.k_offset + j <= a.q_offset + i;
}

// softmax probability from a scaled score and its row's log-sum-exp; 0 for masked keys and for rows that
// see no key at all (lse = -inf), which would otherwise give exp(+inf - inf) = NaN
__device__ __forceinline__ float attn_prob(float scaled_score, float lse, bool visible) {
    return visible && lse != -INFINITY ? expf(scaled_score - lse) : 0.0f;
}

// D (B, nh, Tq) = sum over d of dout * out, per query row: since dP = dO V^T and O = P V,
// rowsum(P ∘ dP) = rowsum(dO ∘ O), the term every softmax-backward row subtracts. Defined in
// attention_naive.cu.
void attention_delta(const AttnDims& a, const float* dout, const float* out, float* D);

// The tiled (flash) attention of bf16 / f16 tensors on tensor cores (attention_tc.cu): what
// attention_forward_tiled / attention_backward_tiled run for those dtypes.
void attention_forward_tc(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse, AttnSpan span);
void attention_backward_tc(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                           const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, AttnSpan span);

}  // namespace penta::cuda
