// attention_naive.cu — attention that materialises the (Tq, Tk) score and probability matrices: cuBLAS
// GEMMs per (batch, head) and a row-wise masked softmax kernel.
//
// Playbook: "Flash attention" (why the naive version's O(T^2) memory traffic for S and P is what flash
// attention removes) and "Activation recomputation" (keeping P for backward is the "no recomputation"
// choice: B·nh·T^2 floats; passing no probs to backward recomputes them from q, k and the saved lse).
// Backward, per head:  dV += P^T dO,  dP = dO V^T,  dS = P ∘ (dP - D),  dQ += scale · dS K,
// dK += scale · dS^T Q,  with D = rowsum(dO ∘ O) (attention_common.cuh).
// GQA: the `group` query heads of one kv head are issued as separate strided-batched GEMMs over the kv
// heads, so each call's batch entries write distinct dK/dV heads and the calls accumulate in turn.
// Tested by tests/00_common/test_cuda.cpp (`build/bin/tests_00 -tc='*cuda*attention*'` on a machine with a GPU).
#include "attention_common.cuh"

namespace penta::cuda {

namespace {

// A per-head matrix inside one of attention's tensors: head (b, h) starts at b*batch_stride +
// h*head_stride, its rows are ld apart. Operands indexed by kv head ignore the query head's position in
// its group.
struct HeadOperand {
    float* ptr;
    int64_t ld, batch_stride, head_stride;
    bool per_kv_head;
};

// q, out, dout, dq: (B, Tq, nh, hd) — head h of token i is row i of a (Tq, hd) matrix with rows nh*hd apart
HeadOperand query_heads(const float* p, const AttnDims& a) {
    return {(float*)p, a.nh * a.hd, a.Tq * a.nh * a.hd, a.hd, false};
}
// k, v, dk, dv: (B, Tk, nkv, hd)
HeadOperand kv_heads(const float* p, const AttnDims& a) {
    return {(float*)p, a.nkv * a.hd, a.Tk * a.nkv * a.hd, a.hd, true};
}
// scores / probabilities: (B, nh, Tq, Tk)
HeadOperand score_heads(const float* p, const AttnDims& a) {
    return {(float*)p, a.Tk, a.nh * a.Tq * a.Tk, a.Tq * a.Tk, false};
}

// C = alpha * op(A) @ op(B) + beta * C for every (b, h). One strided-batched call per (b, position r in
// the GQA group) runs over the kv heads g, i.e. query heads h = g * group + r.
void head_gemm(const AttnDims& a, bool tA, bool tB, int64_t M, int64_t N, int64_t K, float alpha,
               const HeadOperand& A, const HeadOperand& B, float beta, const HeadOperand& C) {
    auto base = [&](const HeadOperand& o, int64_t b, int64_t r) {
        return o.ptr + b * o.batch_stride + (o.per_kv_head ? 0 : r * o.head_stride);
    };
    auto stride = [&](const HeadOperand& o) { return o.per_kv_head ? o.head_stride : a.group * o.head_stride; };
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t r = 0; r < a.group; r++)
            gemm_rm(tA, tB, M, N, K, alpha, base(A, b, r), A.ld, stride(A), base(B, b, r), B.ld, stride(B), beta,
                    base(C, b, r), C.ld, stride(C), a.nkv);
}

// One block per score row (b, h, i): scaled scores in, probabilities out (in place), lse written.
__global__ void masked_softmax_kernel(float* S, float* lse, AttnDims a) {
    const int64_t row = blockIdx.x, i = row % a.Tq;  // row = (b*nh + h)*Tq + i
    float* s = S + row * a.Tk;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < a.Tk; j += blockDim.x)
        if (key_visible(a, i, j)) m = fmaxf(m, s[j]);
    m = block_reduce(m, MaxOp{}, -INFINITY);
    float sum = 0;
    if (m != -INFINITY)
        for (int64_t j = threadIdx.x; j < a.Tk; j += blockDim.x)
            if (key_visible(a, i, j)) sum += expf(s[j] - m);
    sum = block_reduce(sum, SumOp{}, 0.0f);
    const float l = m == -INFINITY ? -INFINITY : m + logf(sum);
    for (int64_t j = threadIdx.x; j < a.Tk; j += blockDim.x) s[j] = attn_prob(s[j], l, key_visible(a, i, j));
    if (threadIdx.x == 0) lse[row] = l;
}

// backward without saved probabilities: P = exp(S - lse) from the recomputed scaled scores (in place)
__global__ void probs_from_lse_kernel(float* S, const float* lse, AttnDims a, int64_t n) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = e / a.Tk, i = row % a.Tq, j = e % a.Tk;
        S[e] = attn_prob(S[e], lse[row], key_visible(a, i, j));
    }
}

// dS = P ∘ (dP - D), in place of dP
__global__ void softmax_backward_kernel(const float* P, float* dP, const float* D, int64_t Tk, int64_t n) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
        dP[e] = P[e] * (dP[e] - D[e / Tk]);
}

// one warp per (b, i, h) row of hd elements; lanes stride over the row, so reads are coalesced
__global__ void attention_delta_kernel(const float* dout, const float* out, float* D, AttnDims a, int64_t rows) {
    const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (warp >= rows) return;  // whole warps leave together: rows are per warp
    float acc = 0;
    for (int64_t d = lane; d < a.hd; d += 32) acc += dout[warp * a.hd + d] * out[warp * a.hd + d];
    acc = warp_reduce(acc, SumOp{});
    if (lane == 0) {
        const int64_t h = warp % a.nh, i = (warp / a.nh) % a.Tq, b = warp / (a.nh * a.Tq);
        D[(b * a.nh + h) * a.Tq + i] = acc;
    }
}

}  // namespace

void attention_delta(const AttnDims& a, const float* dout, const float* out, float* D) {
    const int64_t rows = a.B * a.Tq * a.nh;
    if (rows == 0) return;
    attention_delta_kernel<<<(unsigned)((rows * 32 + kThreads - 1) / kThreads), kThreads>>>(dout, out, D, a, rows);
    KERNEL_CHECK();
}

void attention_forward_naive(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                             Tensor* probs, AttnSpan span) {
    const AttnDims a = attn_dims(q, k, span);
    const int64_t rows = a.B * a.nh * a.Tq;
    if (rows == 0) return;
    Tensor ws;
    if (!probs) ws = workspace(rows * a.Tk * sizeof(float));
    float* P = probs ? probs->ptr<float>() : ws.ptr<float>();  // (B, nh, Tq, Tk)
    const HeadOperand Ph = score_heads(P, a);
    head_gemm(a, false, true, a.Tq, a.Tk, a.hd, a.scale, query_heads(q.ptr<float>(), a), kv_heads(k.ptr<float>(), a),
              0.0f, Ph);  // S = scale · Q K^T
    masked_softmax_kernel<<<(unsigned)rows, kThreads>>>(P, lse.ptr<float>(), a);
    KERNEL_CHECK();
    head_gemm(a, false, false, a.Tq, a.hd, a.Tk, 1.0f, Ph, kv_heads(v.ptr<float>(), a), 0.0f,
              query_heads(out.ptr<float>(), a));  // O = P V
}

void attention_backward_naive(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor* probs, Tensor& dq,
                              Tensor& dk, Tensor& dv, AttnSpan span) {
    const AttnDims a = attn_dims(q, k, span);
    const int64_t rows = a.B * a.nh * a.Tq, n = rows * a.Tk;
    if (n == 0) return;
    const HeadOperand Q = query_heads(q.ptr<float>(), a), K = kv_heads(k.ptr<float>(), a),
                      V = kv_heads(v.ptr<float>(), a), dO = query_heads(dout.ptr<float>(), a);
    Tensor p_ws;
    if (!probs) p_ws = workspace(n * sizeof(float));
    float* P = probs ? probs->ptr<float>() : p_ws.ptr<float>();  // (B, nh, Tq, Tk)
    if (!probs) {
        head_gemm(a, false, true, a.Tq, a.Tk, a.hd, a.scale, Q, K, 0.0f, score_heads(P, a));
        probs_from_lse_kernel<<<grid_for(n), kThreads>>>(P, lse.ptr<float>(), a, n);
        KERNEL_CHECK();
    }
    Tensor ws = workspace((n + rows) * sizeof(float));
    float* dS = ws.ptr<float>();  // (B, nh, Tq, Tk): dP, then dS in place
    float* D = dS + n;            // (B, nh, Tq)
    attention_delta(a, dout.ptr<float>(), out.ptr<float>(), D);
    head_gemm(a, true, false, a.Tk, a.hd, a.Tq, 1.0f, score_heads(P, a), dO, 1.0f, kv_heads(dv.ptr<float>(), a));
    head_gemm(a, false, true, a.Tq, a.Tk, a.hd, 1.0f, dO, V, 0.0f, score_heads(dS, a));
    softmax_backward_kernel<<<grid_for(n), kThreads>>>(P, dS, D, a.Tk, n);
    KERNEL_CHECK();
    head_gemm(a, false, false, a.Tq, a.hd, a.Tk, a.scale, score_heads(dS, a), K, 1.0f, query_heads(dq.ptr<float>(), a));
    head_gemm(a, true, false, a.Tk, a.hd, a.Tq, a.scale, score_heads(dS, a), Q, 1.0f, kv_heads(dk.ptr<float>(), a));
}

}  // namespace penta::cuda
