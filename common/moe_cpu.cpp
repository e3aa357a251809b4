// moe_cpu.cpp — the CPU reference of the mixture-of-experts ops (ops.hpp, "mixture of experts"): the router's
// scores, top-k and renormalised weights and their backward, the per-sequence routing statistics of the
// balance loss, and the row movement of dispatch and combine. The CUDA kernels (cuda/moe.cu) are tested
// against these.
//
// Every op walks one token row at a time and writes only that row's outputs (the dispatch writes each
// copy's own row of the sorted buffer), so nothing is summed in a data-dependent order.
// Playbook: "Expert parallelism". Tested by tests/00_common/test_moe_ops.cpp: `make test CH=00`.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops_backend.hpp"

namespace penta::cpu {

namespace {
// scores of one row: softmax over the E experts, or each logit's sigmoid
void score_row(const float* l, float* s, int64_t E, bool sigmoid) {
    if (sigmoid) {
        for (int64_t e = 0; e < E; e++) s[e] = 1.0f / (1.0f + std::exp(-l[e]));
        return;
    }
    float mx = l[0];
    for (int64_t e = 1; e < E; e++) mx = std::max(mx, l[e]);
    double sum = 0;
    for (int64_t e = 0; e < E; e++) sum += std::exp((double)(l[e] - mx));
    for (int64_t e = 0; e < E; e++) s[e] = (float)(std::exp((double)(l[e] - mx)) / sum);
}
}  // namespace

void moe_router_forward(const Tensor& logits, const Tensor& bias, bool sigmoid, bool normalize, Tensor& scores,
                        Tensor& experts, Tensor& weights) {
    // EXERCISE 08.1 begin: the router's top-k: scores, the k best keys (score + bias, ties to the lower expert), renormalised weights
    const int64_t N = logits.size(0), E = logits.size(1), k = experts.size(1);
    const float* l = logits.ptr<float>();
    const float* b = bias.defined() ? bias.ptr<float>() : nullptr;
    float* s = scores.ptr<float>();
    int32_t* ex = experts.ptr<int32_t>();
    float* w = weights.ptr<float>();
    std::vector<float> key(E);
    std::vector<int32_t> order(E);
    for (int64_t n = 0; n < N; n++) {
        float* sn = s + n * E;
        score_row(l + n * E, sn, E, sigmoid);
        for (int64_t e = 0; e < E; e++) key[e] = sn[e] + (b ? b[e] : 0.0f), order[e] = (int32_t)e;
        // the k best keys, highest first; equal keys go to the lower expert
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int32_t a, int32_t c) { return key[a] > key[c] || (key[a] == key[c] && a < c); });
        double z = 0;
        for (int64_t j = 0; j < k; j++) z += sn[order[j]];
        for (int64_t j = 0; j < k; j++) {
            ex[n * k + j] = order[j];
            w[n * k + j] = normalize ? (float)(sn[order[j]] / z) : sn[order[j]];
        }
    }
    // EXERCISE 08.1 end
}

void moe_router_backward(const Tensor& dweights, const Tensor& scores, const Tensor& experts,
                         const Tensor& aux_dscores, bool sigmoid, bool normalize, Tensor& dlogits) {
    const int64_t N = scores.size(0), E = scores.size(1), k = experts.size(1);
    const int64_t T = aux_dscores.defined() ? N / aux_dscores.size(0) : N;
    const float* s = scores.ptr<float>();
    const float* dw = dweights.ptr<float>();
    const int32_t* ex = experts.ptr<int32_t>();
    const float* aux = aux_dscores.defined() ? aux_dscores.ptr<float>() : nullptr;
    float* dl = dlogits.ptr<float>();
    std::vector<double> ds(E);
    for (int64_t n = 0; n < N; n++) {
        const float* sn = s + n * E;
        for (int64_t e = 0; e < E; e++) ds[e] = aux ? aux[(n / T) * E + e] : 0.0;
        // w_j = s_j / Z with Z = sum of the chosen s: d s_i = (dw_i - sum_j dw_j w_j) / Z
        double z = 0, dot = 0;
        for (int64_t j = 0; j < k; j++) z += sn[ex[n * k + j]];
        for (int64_t j = 0; j < k; j++) dot += (double)dw[n * k + j] * sn[ex[n * k + j]] / z;
        for (int64_t j = 0; j < k; j++)
            ds[ex[n * k + j]] += normalize ? ((double)dw[n * k + j] - dot) / z : (double)dw[n * k + j];
        if (sigmoid) {
            for (int64_t e = 0; e < E; e++) dl[n * E + e] = (float)(ds[e] * sn[e] * (1.0 - sn[e]));
            continue;
        }
        double sds = 0;  // softmax: d l_e = s_e (d s_e - sum_e' s_e' d s_e')
        for (int64_t e = 0; e < E; e++) sds += sn[e] * ds[e];
        for (int64_t e = 0; e < E; e++) dl[n * E + e] = (float)(sn[e] * (ds[e] - sds));
    }
}

void moe_sequence_stats(const Tensor& scores, const Tensor& experts, Tensor& counts, Tensor& score_sums) {
    const int64_t N = scores.size(0), E = scores.size(1), k = experts.size(1), B = counts.size(0), T = N / B;
    const float* s = scores.ptr<float>();
    const int32_t* ex = experts.ptr<int32_t>();
    float* c = counts.ptr<float>();
    float* ss = score_sums.ptr<float>();
    for (int64_t b = 0; b < B; b++) {
        std::vector<double> sum(E, 0.0), cnt(E, 0.0);
        for (int64_t t = 0; t < T; t++) {
            const int64_t n = b * T + t;
            for (int64_t e = 0; e < E; e++) sum[e] += s[n * E + e];
            for (int64_t j = 0; j < k; j++) cnt[ex[n * k + j]] += 1;
        }
        for (int64_t e = 0; e < E; e++) c[b * E + e] = (float)cnt[e], ss[b * E + e] = (float)sum[e];
    }
}

void moe_dispatch(const Tensor& x, const Tensor& pos, Tensor& out) {
    const int64_t N = x.size(0), h = x.size(1), k = pos.size(1);
    const float* xs = x.ptr<float>();
    const int32_t* p = pos.ptr<int32_t>();
    float* o = out.ptr<float>();
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < k; j++)
            if (p[n * k + j] >= 0) std::memcpy(o + p[n * k + j] * h, xs + n * h, h * sizeof(float));
}

void moe_dispatch_backward(const Tensor& dout, const Tensor& pos, Tensor& dx) {
    const int64_t N = dx.size(0), h = dx.size(1), k = pos.size(1);
    const float* d = dout.ptr<float>();
    const int32_t* p = pos.ptr<int32_t>();
    float* g = dx.ptr<float>();
    for (int64_t n = 0; n < N; n++) {
        float* row = g + n * h;
        std::fill(row, row + h, 0.0f);
        for (int64_t j = 0; j < k; j++) {
            if (p[n * k + j] < 0) continue;
            const float* src = d + p[n * k + j] * h;
            for (int64_t i = 0; i < h; i++) row[i] += src[i];
        }
    }
}

void moe_combine(const Tensor& expert_out, const Tensor& pos, const Tensor& weights, Tensor& y) {
    const int64_t N = y.size(0), h = y.size(1), k = pos.size(1);
    const float* eo = expert_out.ptr<float>();
    const int32_t* p = pos.ptr<int32_t>();
    const float* w = weights.ptr<float>();
    float* out = y.ptr<float>();
    for (int64_t n = 0; n < N; n++) {
        float* row = out + n * h;
        std::fill(row, row + h, 0.0f);
        for (int64_t j = 0; j < k; j++) {
            if (p[n * k + j] < 0) continue;
            const float* src = eo + p[n * k + j] * h;
            const float wj = w[n * k + j];
            for (int64_t i = 0; i < h; i++) row[i] += wj * src[i];
        }
    }
}

void moe_combine_backward(const Tensor& dy, const Tensor& expert_out, const Tensor& pos, const Tensor& weights,
                          Tensor& d_expert_out, Tensor& dweights) {
    const int64_t N = dy.size(0), h = dy.size(1), k = pos.size(1);
    const float* d = dy.ptr<float>();
    const float* eo = expert_out.ptr<float>();
    const int32_t* p = pos.ptr<int32_t>();
    const float* w = weights.ptr<float>();
    float* deo = d_expert_out.ptr<float>();
    float* dw = dweights.ptr<float>();
    std::memset(deo, 0, d_expert_out.nbytes());
    for (int64_t n = 0; n < N; n++) {
        const float* dn = d + n * h;
        for (int64_t j = 0; j < k; j++) {
            const int64_t r = p[n * k + j];
            if (r < 0) {
                dw[n * k + j] = 0.0f;
                continue;
            }
            const float* src = eo + r * h;
            float* dst = deo + r * h;
            double dot = 0;
            for (int64_t i = 0; i < h; i++) dot += (double)dn[i] * src[i], dst[i] = w[n * k + j] * dn[i];
            dw[n * k + j] = (float)dot;
        }
    }
}

}  // namespace penta::cpu
