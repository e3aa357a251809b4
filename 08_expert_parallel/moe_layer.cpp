// moe_layer.cpp — the MoE MLP's declaration, forward and backward (moe_layer.hpp). Read forward,
// backward_input and backward_weight side by side: every all-to-all of the forward has its mirror in the
// backward, and the expert-parallel communication is all in these three functions.
// Playbook: "Expert parallelism". Run: `mpirun -np 2 build/bin/08_expert_parallel --dp 2 --ep 2`.
#include "moe_layer.hpp"

#include <cmath>

#include "../common/ops.hpp"

namespace penta {

MoeBalance parse_moe_balance(const std::string& v) {
    for (MoeBalance b : {MoeBalance::none, MoeBalance::aux, MoeBalance::bias})
        if (v == moe_balance_name(b)) return b;
    FAIL("--moe-balance %s must be none, aux (the balance loss) or bias (DeepSeek-V3's auxiliary-loss-free update)",
         v.c_str());
}

const char* moe_balance_name(MoeBalance b) {
    switch (b) {
        case MoeBalance::none: return "none";
        case MoeBalance::aux: return "aux";
        case MoeBalance::bias: return "bias";
    }
    return "?";
}

namespace {
SwiGLUNames names_of(MoeNaming n) {
    if (n == MoeNaming::mixtral) return SwiGLUNames{"w1.weight", "w3.weight", "w2.weight"};  // gate, up, down
    return SwiGLUNames{};
}
const char* prefix_of(MoeNaming n) { return n == MoeNaming::mixtral ? "block_sparse_moe." : "mlp."; }
}  // namespace

// What a MoE layer keeps of one micro-batch.
struct MoeLayer::Acts : MlpActs {
    std::unique_ptr<MlpActs> dense;   // a dense layer's MLP (nothing else is set then)
    RouterActs router;
    DispatchPlan plan;
    ExpertExchange exchange;
    Tensor pos;                       // (N, k) i32: each choice's row in the send buffer, -1 dropped
    Tensor x_experts;                 // (received, h) the local experts' input, by expert (W reads it)
    std::vector<std::unique_ptr<MlpActs>> experts;  // per local expert (nullptr: no rows)
    Tensor expert_out;                // (sent, h) the experts' outputs back in the send order
    std::unique_ptr<MlpActs> shared;
    Tensor d_experts_out;             // B -> W: (received, h) d loss / d the local experts' outputs
};

MoeLayer::MoeLayer(const LlamaConfig& cfg, const MoeOptions& opt, Device device, Comm* ep, Comm* tp)
    : cfg_(cfg),
      opt_(opt),
      device_(device),
      own_ep_(ep ? nullptr : make_self_comm("ep")),
      dispatch_(ep ? *ep : *own_ep_, cfg.moe.experts, cfg.hidden),
      tp_(tp),
      names_(names_of(cfg.moe.naming)),
      prefix_(prefix_of(cfg.moe.naming)),
      router_(cfg, prefix_ + "gate.weight", opt.balance == MoeBalance::aux ? opt.aux_coef : 0.0),
      dense_("mlp."),
      shared_(prefix_ + "shared_experts.", SwiGLUNames{}, cfg.moe.shared_experts * cfg.moe.expert_ffn) {
    CHECK(cfg.moe.enabled(), "model %s has no experts (a dense model): the MoE layer needs a MoE model (--model "
          "tiny-moe, mixtral-8x7b, deepseek-moe-16b or a mixtral config.json)", cfg.name.c_str());
    cfg.validate();
    CHECK(opt.capacity_factor >= 0 && std::isfinite(opt.capacity_factor),
          "--moe-capacity %g must be a finite number >= 0 (0: no capacity, nothing dropped)", opt.capacity_factor);
    CHECK(opt.bias_rate >= 0 && std::isfinite(opt.bias_rate), "--moe-bias-rate %g must be a finite number >= 0",
          opt.bias_rate);
    CHECK(!(opt.balance == MoeBalance::aux && cfg.moe.sigmoid_scores),
          "--moe-balance aux with sigmoid scores: the balance loss is defined on the softmax's probabilities; "
          "DeepSeek-V3 balances a sigmoid router with the bias (--moe-balance bias)");
    for (int64_t j = 0; j < cfg.moe.experts; j++)
        experts_.emplace_back(prefix_ + "experts." + std::to_string(j) + ".", names_, cfg.moe.expert_ffn);
    bias_.resize(cfg.n_layers);
    stats_.resize(cfg.n_layers);
    for (int64_t i = 0; i < cfg.n_layers; i++)
        if (cfg.moe.moe_layer(i) && opt.balance == MoeBalance::bias)
            bias_[i] = Tensor::zeros({cfg.moe.experts}, DType::f32, device, Tag::params);  // (E) not in the flat buffer
    reset_stats();
}

std::string MoeLayer::expert_role(int64_t j, const std::string& matrix) const {
    return prefix_ + "experts." + std::to_string(j) + "." + matrix;
}

void MoeLayer::reset_stats() {
    for (int64_t i = 0; i < cfg_.n_layers; i++) {
        if (!cfg_.moe.moe_layer(i)) continue;
        stats_[i] = MoeLayerStats{};
        stats_[i].routed.assign(cfg_.moe.experts, 0);
        stats_[i].kept.assign(cfg_.moe.experts, 0);
        stats_[i].sent.assign(ep(), 0);
    }
}

void MoeLayer::declare(LayoutBuilder& b) const {
    const int64_t layer = b.layer();
    if (!cfg_.moe.moe_layer(layer)) {
        dense_.declare(b);
        return;
    }
    router_.declare(b);  // in the layer's unit: replicated over ep
    if (cfg_.moe.shared_experts > 0) shared_.declare(b);
    // this rank's experts, in a unit of their own: sharded over ep, so summed over edp (reduce_groups.hpp);
    // the whole model's layout (a Hugging Face folder checked or exported) has every expert, by its global name
    b.begin_unit("layer " + std::to_string(layer) + " experts", layer, true, kAxisDP | kAxisCP, kAxisEP);
    const int first = b.whole() ? 0 : first_expert(), n = b.whole() ? (int)cfg_.moe.experts : experts_per_rank();
    for (int j = first; j < first + n; j++) experts_[j].declare(b);
    b.end_unit();
}

std::string moe_hf_export_gap(const MoeOptions& o) {
    return o.balance == MoeBalance::bias ? "a per-expert routing bias (--moe-balance bias) added to the router's "
                                           "scores when it picks the experts"
                                         : "";
}

std::string MoeLayer::hf_export_gap() const { return moe_hf_export_gap(opt_); }

std::unique_ptr<MlpActs> MoeLayer::forward(const LlamaConfig& c, const LayerParams& w, const MicroBatch& mb,
                                           double global_tokens, const Tensor& x, Tensor& y, Tag saved) {
    auto a = std::make_unique<Acts>();
    const int64_t layer = w.layer();
    if (!cfg_.moe.moe_layer(layer)) {
        a->dense = dense_.forward(c, w, mb, global_tokens, x, y, saved);
        return a;
    }
    const int64_t N = x.size(0), h = x.size(1), k = cfg_.moe.top_k, E = cfg_.moe.experts;
    const Device dev = x.device();
    // 1. route, and plan the copies: capacity, drops, each kept copy's row in the send buffer (by expert)
    a->router = router_.forward(w, x, mb, global_tokens, bias_[layer], saved);
    if (routing_log_) routing_log_->push_back(a->router.experts_host);
    a->aux_loss = router_.aux_coef() * a->router.balance;
    a->plan = plan_dispatch(a->router.experts_host, mb.B, N / mb.B, k, E, opt_.capacity_factor);
    a->pos = Tensor::from_host_i32(a->plan.pos, {N, k}, dev, saved);  // (N, k)
    Tensor send = Tensor::empty({a->plan.rows(), h}, x.dtype, dev, Tag::workspace);  // (sent, h)
    moe_dispatch(x, a->pos, send);
    // 2. counts, then the copies to the ranks of their experts (all-to-all-v over ep)
    a->exchange = dispatch_.exchange_counts(a->plan, dev);
    a->x_experts = dispatch_.to_experts(a->exchange, send, saved);  // (received, h) by local expert
    // 3. each local expert on its rows
    Tensor out = Tensor::empty(a->x_experts.shape, x.dtype, dev, Tag::workspace);  // (received, h)
    int64_t row = 0;
    for (int el = 0; el < experts_per_rank(); el++) {
        const int64_t n = a->exchange.local_rows[el];
        a->experts.emplace_back();
        if (n == 0) continue;  // no copy came to this expert: nothing to compute (or to learn)
        Tensor ye, rows = out.slice(row, n);
        a->experts.back() = experts_[first_expert() + el].forward(c, w, mb, global_tokens, a->x_experts.slice(row, n), ye, saved);
        copy(rows, ye);
        row += n;
    }
    // 4. the outputs back to their tokens' ranks (all-to-all-v), weighted and summed per token
    a->expert_out = dispatch_.from_experts(a->exchange, out, saved);  // (sent, h) in the send order
    y = Tensor::empty({N, h}, x.dtype, dev, Tag::workspace);          // (N, h)
    moe_combine(a->expert_out, a->pos, a->router.weights, y);
    if (cfg_.moe.shared_experts > 0) {
        Tensor ys;
        a->shared = shared_.forward(c, w, mb, global_tokens, x, ys, saved);
        add_inplace(y, ys);
    }
    return a;
}

Tensor MoeLayer::backward_input(const LayerParams& w, MlpActs& acts, const Tensor& dy, Tag keep) {
    Acts& a = static_cast<Acts&>(acts);
    if (a.dense) return dense_.backward_input(w, *a.dense, dy, keep);
    const int64_t N = dy.size(0), h = dy.size(1), k = cfg_.moe.top_k;
    const Device dev = dy.device();
    // 4'. d weights (dy · expert output) and d expert outputs (weight · dy), in the send order
    Tensor d_sent = Tensor::empty(a.expert_out.shape, dy.dtype, dev, Tag::workspace);  // (sent, h)
    Tensor d_weights = Tensor::empty({N, k}, dy.dtype, dev, Tag::workspace);          // (N, k)
    moe_combine_backward(dy, a.expert_out, a.pos, a.router.weights, d_sent, d_weights);
    a.expert_out = Tensor();
    if (tp_ && tp_->size() > 1) tp_->all_reduce(d_weights);  // each tp rank's experts gave a partial output
    // the router: d logits; its input gradient added by one tp rank only (the others computed the same one)
    Tensor dx = Tensor::zeros({N, h}, dy.dtype, dev, keep);  // (N, h) the norm's W reads it
    const bool adds_router = !tp_ || tp_->rank() == 0;
    router_.backward_input(w, a.router, d_weights, adds_router ? &dx : nullptr, keep);
    // 3'. the d outputs to the experts (the dispatch's way), each expert's backward
    a.d_experts_out = dispatch_.to_experts(a.exchange, d_sent, keep);  // (received, h) W's dy
    Tensor d_in = Tensor::empty(a.x_experts.shape, dy.dtype, dev, Tag::workspace);  // (received, h)
    int64_t row = 0;
    for (int el = 0; el < experts_per_rank(); el++) {
        const int64_t n = a.exchange.local_rows[el];
        if (n == 0) continue;
        Tensor part = d_in.slice(row, n);
        copy(part, experts_[first_expert() + el].backward_input(w, *a.experts[el], a.d_experts_out.slice(row, n), keep));
        row += n;
    }
    // 2'. the d inputs back to the tokens' ranks (the combine's way), summed over each token's copies
    Tensor d_send = dispatch_.from_experts(a.exchange, d_in, Tag::workspace);  // (sent, h)
    Tensor d_moe = Tensor::empty({N, h}, dy.dtype, dev, Tag::workspace);
    moe_dispatch_backward(d_send, a.pos, d_moe);
    add_inplace(dx, d_moe);
    if (a.shared) add_inplace(dx, shared_.backward_input(w, *a.shared, dy, keep));
    // what this micro-batch's routing did, for the step's statistics and the bias update
    MoeLayerStats& s = stats_.at(w.layer());
    for (int64_t e = 0; e < cfg_.moe.experts; e++) s.routed[e] += a.plan.routed[e], s.kept[e] += a.plan.kept[e];
    for (int q = 0; q < ep(); q++) s.sent[q] += a.exchange.send_rows[q];
    s.balance += a.router.balance;
    s.micro_batches++;
    a.pos = Tensor();
    return dx;
}

void MoeLayer::backward_weight(LayerParams& g, const Tensor& x, MlpActs& acts) {
    Acts& a = static_cast<Acts&>(acts);
    if (a.dense) {
        dense_.backward_weight(g, x, *a.dense);
        return;
    }
    router_.backward_weight(g, x, a.router);
    int64_t row = 0;
    for (int el = 0; el < experts_per_rank(); el++) {
        const int64_t n = a.exchange.local_rows[el];
        if (n == 0) continue;
        experts_[first_expert() + el].backward_weight(g, a.x_experts.slice(row, n), *a.experts[el]);
        row += n;
    }
    if (a.shared) shared_.backward_weight(g, x, *a.shared);
    a = Acts{};  // consumed
}

}  // namespace penta
