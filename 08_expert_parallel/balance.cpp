// balance.cpp — the global batch's expert load and the auxiliary-loss-free bias update (balance.hpp).
// Playbook: "Expert parallelism". Test: `make test CH=08`.
#include "balance.hpp"

#include <algorithm>

#include "../common/ops.hpp"

namespace penta {

double max_violation(const std::vector<double>& load) {
    double sum = 0, mx = 0;
    for (double v : load) sum += v, mx = std::max(mx, v);
    return sum > 0 ? mx / (sum / (double)load.size()) - 1 : 0.0;
}

ExpertBalanceHooks::ExpertBalanceHooks(MoeLayer& moe, Comm* batch) : moe_(moe), batch_(batch) {}

ExpertLoad ExpertBalanceHooks::collect() {
    const LlamaConfig& c = moe_.config();
    const int64_t L = c.n_layers, E = c.moe.experts;
    const std::vector<MoeLayerStats>& st = moe_.stats();
    // one all-reduce of every layer's routed and kept counts (int32: exact), and one of the balance scores
    std::vector<int32_t> counts(L * 2 * E, 0);
    double balance = 0;
    for (int64_t i = 0; i < L; i++) {
        if (!c.moe.moe_layer(i)) continue;
        for (int64_t e = 0; e < E; e++)
            counts[(i * 2) * E + e] = (int32_t)st[i].routed[e], counts[(i * 2 + 1) * E + e] = (int32_t)st[i].kept[e];
        balance += st[i].balance;
    }
    Tensor t = Tensor::from_host_i32(counts, {(int64_t)counts.size()}, moe_.device(), Tag::comm);
    if (batch_ && batch_->size() > 1) {
        batch_->all_reduce(t);
        balance = batch_->all_reduce_scalar(balance);
    }
    counts = t.to_host_i32();
    ExpertLoad load;
    load.routed.assign(L, {});
    load.kept.assign(L, {});
    load.total.assign(E, 0);
    for (int64_t i = 0; i < L; i++) {
        if (!c.moe.moe_layer(i)) continue;
        load.routed[i].assign(counts.begin() + (i * 2) * E, counts.begin() + (i * 2 + 1) * E);
        load.kept[i].assign(counts.begin() + (i * 2 + 1) * E, counts.begin() + (i * 2 + 2) * E);
        for (int64_t e = 0; e < E; e++) {
            load.total[e] += load.routed[i][e];
            load.dropped += load.routed[i][e] - load.kept[i][e];
        }
        load.max_vio += max_violation(load.routed[i]);
        load.moe_layers++;
    }
    if (load.moe_layers > 0) {
        load.max_vio /= (double)load.moe_layers;
        // each micro-batch's balance is a token-weighted part of the global batch's: their sum per layer
        load.balance = balance / (double)load.moe_layers;
    }
    return load;
}

std::vector<StateTensor> ExpertBalanceHooks::checkpoint_state(const ParamLayout& layout) {
    std::vector<StateTensor> out;
    const LlamaConfig& c = moe_.config();
    if (moe_.options().balance != MoeBalance::bias) return out;
    const std::string& router = moe_.router_role();  // "...gate.weight"
    for (int64_t i = 0; i < c.n_layers; i++) {
        if (!c.moe.moe_layer(i)) continue;
        const int t = layout.find_in_unit(layout.layer_unit(i), router);
        if (t < 0) continue;  // a layer of another pipeline stage
        StateTensor s{layout.tensors[t], &moe_.bias(i)};  // the router's parallelism: replicated but over pp
        const std::string role = router.substr(0, router.size() - 6) + "e_score_correction_bias";
        s.where.name = "model.layers." + std::to_string(i) + "." + role;
        s.where.role = role;
        s.where.shape = s.where.full_shape = {c.moe.experts};
        s.where.row0 = s.where.col0 = 0;
        out.push_back(s);
    }
    return out;
}

void ExpertBalanceHooks::after_update() {
    load_ = collect();
    const LlamaConfig& c = moe_.config();
    if (moe_.options().balance != MoeBalance::bias) return;
    const float rate = (float)moe_.options().bias_rate;
    for (int64_t i = 0; i < c.n_layers; i++) {
        if (!c.moe.moe_layer(i)) continue;
        const std::vector<double>& load = load_.routed[i];
        double mean = 0;
        for (double v : load) mean += v / (double)load.size();
        std::vector<float> b = moe_.bias(i).to_host();
        for (size_t e = 0; e < load.size(); e++) b[e] += rate * (load[e] < mean ? 1.0f : load[e] > mean ? -1.0f : 0.0f);
        Tensor nb = Tensor::from_host(b, {(int64_t)b.size()}, moe_.bias(i).device(), Tag::workspace);
        copy(moe_.bias(i), nb);
    }
}

}  // namespace penta
