// moe.cu — the mixture-of-experts kernels (ops.hpp, "mixture of experts"): the router (scores, top-k,
// renormalised weights) and its backward, the per-sequence routing statistics of the balance loss, and the
// row movement of dispatch and combine.
//
// Playbook: "Expert parallelism" and "GPU kernels". The router works on rows of E scores, E a few dozen:
// one thread per token row keeps its row in registers' reach and loops over the experts (the k passes of the
// top-k are k·E comparisons). Dispatch and combine move rows of h values: one block per token row, threads
// along h (coalesced), each block writing only its own row or the rows of its own copies (every row of the
// sorted buffer belongs to one copy), so there are no atomics and the sums run in a fixed order — the
// results are deterministic, as on the CPU (moe_cpu.cpp, the reference these are tested against).
// Tested by tests/00_common/test_moe_ops.cpp (`build/bin/tests_00 -tc='*moe*cuda*'` on a machine with a GPU).
#include "cuda_util.cuh"

namespace penta::cuda {

namespace {

__device__ __forceinline__ float score_of(float logit, float mx, double sum, bool sigmoid) {
    return sigmoid ? 1.0f / (1.0f + expf(-logit)) : (float)(exp((double)(logit - mx)) / sum);
}

__global__ void router_forward_kernel(const float* logits, const float* bias, float* scores, int32_t* experts,
                                      float* weights, int64_t N, int E, int k, bool sigmoid, bool normalize) {
    const int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float* l = logits + n * E;
    float* s = scores + n * E;
    float mx = l[0];
    double sum = 0;
    if (!sigmoid) {
        for (int e = 1; e < E; e++) mx = fmaxf(mx, l[e]);
        for (int e = 0; e < E; e++) sum += exp((double)(l[e] - mx));
    }
    for (int e = 0; e < E; e++) s[e] = score_of(l[e], mx, sum, sigmoid);
    // k passes: each takes the best key not taken yet; ties to the lower expert (strict >)
    double z = 0;
    int32_t* ex = experts + n * k;
    for (int j = 0; j < k; j++) {
        int best = -1;
        float best_key = 0;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= ex[i] == e;
            if (taken) continue;
            const float key = s[e] + (bias ? bias[e] : 0.0f);
            if (best < 0 || key > best_key) best = e, best_key = key;
        }
        ex[j] = best;
        z += s[best];
    }
    for (int j = 0; j < k; j++) weights[n * k + j] = normalize ? (float)(s[ex[j]] / z) : s[ex[j]];
}

__global__ void router_backward_kernel(const float* dweights, const float* scores, const int32_t* experts,
                                       const float* aux, float* dlogits, int64_t N, int E, int k, int64_t T,
                                       bool sigmoid, bool normalize) {
    const int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float* s = scores + n * E;
    const float* dw = dweights + n * k;
    const int32_t* ex = experts + n * k;
    float* dl = dlogits + n * E;
    double z = 0, dot = 0;
    for (int j = 0; j < k; j++) z += s[ex[j]];
    for (int j = 0; j < k; j++) dot += (double)dw[j] * s[ex[j]] / z;
    // d scores, built in dlogits, then turned into d logits in place
    for (int e = 0; e < E; e++) dl[e] = aux ? aux[(n / T) * E + e] : 0.0f;
    for (int j = 0; j < k; j++) dl[ex[j]] += normalize ? (float)(((double)dw[j] - dot) / z) : dw[j];
    if (sigmoid) {
        for (int e = 0; e < E; e++) dl[e] = dl[e] * s[e] * (1.0f - s[e]);
        return;
    }
    double sds = 0;
    for (int e = 0; e < E; e++) sds += (double)s[e] * dl[e];
    for (int e = 0; e < E; e++) dl[e] = (float)(s[e] * ((double)dl[e] - sds));
}

// one thread per (sequence b, expert e): its T rows in order
__global__ void sequence_stats_kernel(const float* scores, const int32_t* experts, float* counts, float* sums,
                                      int64_t B, int64_t T, int E, int k) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= B * E) return;
    const int64_t b = i / E;
    const int e = (int)(i % E);
    double sum = 0, cnt = 0;
    for (int64_t t = 0; t < T; t++) {
        const int64_t n = b * T + t;
        sum += scores[n * E + e];
        for (int j = 0; j < k; j++) cnt += experts[n * k + j] == e;
    }
    counts[i] = (float)cnt;
    sums[i] = (float)sum;
}

__global__ void dispatch_kernel(const float* x, const int32_t* pos, float* out, int64_t h, int k) {
    const int64_t n = blockIdx.x;
    for (int j = 0; j < k; j++) {
        const int64_t r = pos[n * k + j];
        if (r < 0) continue;
        for (int64_t i = threadIdx.x; i < h; i += blockDim.x) out[r * h + i] = x[n * h + i];
    }
}

// dx[n] = sum_j w_j src[pos[n, j]] (w = 1 without weights)
__global__ void gather_sum_kernel(const float* src, const int32_t* pos, const float* weights, float* dst, int64_t h,
                                  int k) {
    const int64_t n = blockIdx.x;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < k; j++) {
            const int64_t r = pos[n * k + j];
            if (r >= 0) acc += (weights ? weights[n * k + j] : 1.0f) * src[r * h + i];
        }
        dst[n * h + i] = acc;
    }
}

__global__ void combine_backward_kernel(const float* dy, const float* eo, const int32_t* pos, const float* weights,
                                        float* deo, float* dweights, int64_t h, int k) {
    const int64_t n = blockIdx.x;
    for (int j = 0; j < k; j++) {
        const int64_t r = pos[n * k + j];  // the same for every thread: the block stays together
        double dot = 0;
        if (r >= 0)
            for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
                dot += (double)dy[n * h + i] * eo[r * h + i];
                deo[r * h + i] = weights[n * k + j] * dy[n * h + i];
            }
        dot = block_reduce(dot, SumOp{}, 0.0);
        if (threadIdx.x == 0) dweights[n * k + j] = r >= 0 ? (float)dot : 0.0f;
    }
}

int blocks_for_rows(int64_t N) { return (int)((N + kThreads - 1) / kThreads); }

}  // namespace

void moe_router_forward(const Tensor& logits, const Tensor& bias, bool sigmoid, bool normalize, Tensor& scores,
                        Tensor& experts, Tensor& weights) {
    const int64_t N = logits.size(0);
    if (N == 0) return;
    router_forward_kernel<<<blocks_for_rows(N), kThreads>>>(
        logits.ptr<float>(), bias.defined() ? bias.ptr<float>() : nullptr, scores.ptr<float>(),
        experts.ptr<int32_t>(), weights.ptr<float>(), N, (int)logits.size(1), (int)experts.size(1), sigmoid, normalize);
    KERNEL_CHECK();
}

void moe_router_backward(const Tensor& dweights, const Tensor& scores, const Tensor& experts,
                         const Tensor& aux_dscores, bool sigmoid, bool normalize, Tensor& dlogits) {
    const int64_t N = scores.size(0);
    if (N == 0) return;
    const int64_t T = aux_dscores.defined() ? N / aux_dscores.size(0) : N;
    router_backward_kernel<<<blocks_for_rows(N), kThreads>>>(
        dweights.ptr<float>(), scores.ptr<float>(), experts.ptr<int32_t>(),
        aux_dscores.defined() ? aux_dscores.ptr<float>() : nullptr, dlogits.ptr<float>(), N, (int)scores.size(1),
        (int)experts.size(1), T, sigmoid, normalize);
    KERNEL_CHECK();
}

void moe_sequence_stats(const Tensor& scores, const Tensor& experts, Tensor& counts, Tensor& score_sums) {
    const int64_t B = counts.size(0), E = counts.size(1), T = scores.size(0) / B;
    if (B * E == 0) return;
    sequence_stats_kernel<<<blocks_for_rows(B * E), kThreads>>>(scores.ptr<float>(), experts.ptr<int32_t>(),
                                                                counts.ptr<float>(), score_sums.ptr<float>(), B, T,
                                                                (int)E, (int)experts.size(1));
    KERNEL_CHECK();
}

void moe_dispatch(const Tensor& x, const Tensor& pos, Tensor& out) {
    if (x.size(0) == 0) return;
    dispatch_kernel<<<(unsigned)x.size(0), kThreads>>>(x.ptr<float>(), pos.ptr<int32_t>(), out.ptr<float>(), x.size(1),
                                                       (int)pos.size(1));
    KERNEL_CHECK();
}

void moe_dispatch_backward(const Tensor& dout, const Tensor& pos, Tensor& dx) {
    if (dx.size(0) == 0) return;
    gather_sum_kernel<<<(unsigned)dx.size(0), kThreads>>>(dout.ptr<float>(), pos.ptr<int32_t>(), nullptr,
                                                          dx.ptr<float>(), dx.size(1), (int)pos.size(1));
    KERNEL_CHECK();
}

void moe_combine(const Tensor& expert_out, const Tensor& pos, const Tensor& weights, Tensor& y) {
    if (y.size(0) == 0) return;
    gather_sum_kernel<<<(unsigned)y.size(0), kThreads>>>(expert_out.ptr<float>(), pos.ptr<int32_t>(),
                                                         weights.ptr<float>(), y.ptr<float>(), y.size(1),
                                                         (int)pos.size(1));
    KERNEL_CHECK();
}

void moe_combine_backward(const Tensor& dy, const Tensor& expert_out, const Tensor& pos, const Tensor& weights,
                          Tensor& d_expert_out, Tensor& dweights) {
    if (d_expert_out.numel() > 0) memset_zero(d_expert_out.data(), d_expert_out.nbytes());
    if (dy.size(0) == 0) return;
    combine_backward_kernel<<<(unsigned)dy.size(0), kThreads>>>(dy.ptr<float>(), expert_out.ptr<float>(),
                                                                pos.ptr<int32_t>(), weights.ptr<float>(),
                                                                d_expert_out.ptr<float>(), dweights.ptr<float>(),
                                                                dy.size(1), (int)pos.size(1));
    KERNEL_CHECK();
}

}  // namespace penta::cuda
