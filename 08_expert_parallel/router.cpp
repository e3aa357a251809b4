// router.cpp — the router's forward and backward, and the per-sequence balance loss (router.hpp).
// Playbook: "Expert parallelism". Test: `make test CH=08`.
#include "router.hpp"

#include <cmath>

#include "../common/ops.hpp"

namespace penta {

Router::Router(const LlamaConfig& cfg, std::string role, double aux_coef)
    : E_(cfg.moe.experts), k_(cfg.moe.top_k), h_(cfg.hidden), sigmoid_(cfg.moe.sigmoid_scores),
      normalize_(cfg.moe.norm_topk), role_(std::move(role)), aux_coef_(aux_coef) {
    CHECK(aux_coef >= 0 && std::isfinite(aux_coef), "--moe-aux-coef %g must be a finite number >= 0", aux_coef);
}

void Router::declare(LayoutBuilder& b) const {
    const int t = b.add(role_, {E_, h_}, Split::replicated, 0.02f);
    // every tp rank routes all the (gathered) tokens: its gradient is whole, not a partial sum over tp as a
    // replicated norm's is under sequence parallelism
    if (t >= 0) b.tensor(t).grad_summed_on &= ~kAxisTP;
}

RouterActs Router::forward(const LayerParams& w, const Tensor& x, const MicroBatch& mb, double global_tokens,
                           const Tensor& bias, Tag saved) const {
    const int64_t N = x.size(0);
    const Device dev = x.device();
    RouterActs a;
    Tensor logits = Tensor::empty({N, E_}, x.dtype, dev, Tag::workspace);  // (N, E)
    linear_forward(x, w[role_], logits);
    a.scores = Tensor::empty({N, E_}, x.dtype, dev, saved);             // (N, E)
    a.experts = Tensor::empty({N, k_}, DType::i32, dev, saved);         // (N, k)
    a.weights = Tensor::empty({N, k_}, x.dtype, dev, saved);            // (N, k)
    moe_router_forward(logits, bias, sigmoid_, normalize_, a.scores, a.experts, a.weights);
    a.experts_host = a.experts.to_host_i32();
    if (aux_coef_ == 0 || !mb.targets.defined()) return a;

    // the balance loss, sequence by sequence: counts and mean scores per (sequence, expert)
    const int64_t B = mb.B, T = N / B;
    CHECK(T * B == N, "the router's %lld rows are not %lld sequences", (long long)N, (long long)B);
    Tensor counts = Tensor::empty({B, E_}, DType::f32, dev, Tag::workspace), sums = Tensor::empty({B, E_}, DType::f32, dev, Tag::workspace);
    moe_sequence_stats(a.scores, a.experts, counts, sums);
    const std::vector<float> c = counts.to_host(), p = sums.to_host();
    const std::vector<int32_t> targets = mb.targets.to_host_i32();
    std::vector<float> grad(B * E_);
    const double per_choice = (double)E_ / (double)(k_ * T);  // E / (k T)
    for (int64_t s = 0; s < B; s++) {
        int64_t n_s = 0;
        for (int64_t t = 0; t < T; t++) n_s += targets[s * T + t] >= 0;
        const double weight = (double)n_s / global_tokens;  // this sequence's share of the loss
        double b_s = 0;
        for (int64_t e = 0; e < E_; e++) {
            b_s += per_choice * c[s * E_ + e] * (p[s * E_ + e] / T);
            // d B_s / d score_e of each of its T rows: E / (k T) · count_e / T
            grad[s * E_ + e] = (float)(aux_coef_ * weight * per_choice * c[s * E_ + e] / T);
        }
        a.balance += weight * b_s;
    }
    a.aux_dscores = Tensor::from_host(grad, {B, E_}, dev, saved);  // (B, E)
    return a;
}

void Router::backward_input(const LayerParams& w, RouterActs& a, const Tensor& d_weights, Tensor* dx_add,
                            Tag keep) const {
    a.d_logits = Tensor::empty(a.scores.shape, a.scores.dtype, a.scores.device(), keep);  // (N, E) W reads it
    moe_router_backward(d_weights, a.scores, a.experts, a.aux_dscores, sigmoid_, normalize_, a.d_logits);
    if (dx_add) linear_backward_input_add(a.d_logits, w[role_], *dx_add);  // dx += d_logits W_r
    a.scores = a.weights = a.experts = a.aux_dscores = Tensor();  // W reads d_logits and x only
}

void Router::backward_weight(LayerParams& g, const Tensor& x, RouterActs& a) const {
    Tensor no_dx, gw = g[role_];
    linear_backward(a.d_logits, x, Tensor(), no_dx, gw);  // d W_r += d_logits^T x
    a.d_logits = Tensor();
}

}  // namespace penta
