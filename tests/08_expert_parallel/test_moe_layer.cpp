// test_moe_layer.cpp — chapter 08, the MoE layer on one rank: it equals the dense computation of the same
// experts (every token through its chosen experts, weighted; the copies beyond the capacity left out), its
// gradients (router, experts, shared experts, input; the balance loss's included) equal finite differences,
// the whole model's too, split backward equals fused, and the capacity rule drops what GShard's rule drops.
// Playbook: "Expert parallelism". Run: `make test CH=08`, or `build/bin/tests_08 -ts='ch08 np1'`.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../../08_expert_parallel/balance.hpp"
#include "../../08_expert_parallel/dispatch_plan.hpp"
#include "../../08_expert_parallel/moe_layer.hpp"
#include "../testing.hpp"
#include "ep_testing.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::ep_testing;

namespace {

// one layer's parameters of model m (or its gradients) as the model hands them to its cores
LayerParams layer_view(Model& m, const Tensor& flat, int64_t layer) {
    LayerParams w(m.layout(), layer);
    for (int u : m.layout().layer_units[layer]) {
        const ParamUnit& unit = m.layout().units[u];
        w.add_unit(u, flat.flat(unit.offset, unit.numel));
    }
    return w;
}

std::vector<double> host(const Tensor& t) {
    const std::vector<float> v = t.to_host();
    return std::vector<double>(v.begin(), v.end());
}

// y = W x for W (rows, cols) row-major, in double
std::vector<double> matvec(const std::vector<double>& W, const double* x, int64_t rows, int64_t cols) {
    std::vector<double> y(rows, 0.0);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[r] += W[r * cols + c] * x[c];
    return y;
}

// The MoE layer written out token by token in double, from the weights by name: router, top-k, renormalised
// weights, GShard's per-sequence capacity (first choices first, tokens in order), SwiGLU experts, the shared
// experts. Returns y (N, h); dropped counts the copies left out.
std::vector<double> dense_moe(Model& m, const LlamaConfig& c, int64_t layer, const std::vector<double>& x, int64_t B,
                              int64_t T, double capacity_factor, const std::string& prefix, const SwiGLUNames& names,
                              int64_t* dropped, double* min_margin) {
    const int64_t N = B * T, h = c.hidden, E = c.moe.experts, k = c.moe.top_k, f = c.moe.expert_ffn;
    const std::string L = "model.layers." + std::to_string(layer) + ".";
    auto weights_of = [&](const std::string& role) {
        const ParamTensor& t = m.layout().find(L + role);
        return host(m.params().flat(t.offset, t.numel()));
    };
    const std::vector<double> Wr = weights_of(prefix + "gate.weight");
    std::vector<std::vector<int64_t>> chosen(N);
    std::vector<std::vector<double>> w(N);
    *min_margin = INFINITY;
    for (int64_t n = 0; n < N; n++) {
        std::vector<double> s = matvec(Wr, &x[n * h], E, h);
        double mx = *std::max_element(s.begin(), s.end()), z = 0;
        if (c.moe.sigmoid_scores)
            for (double& v : s) v = 1 / (1 + std::exp(-v));
        else {
            for (double& v : s) z += std::exp(v - mx);
            for (double& v : s) v = std::exp(v - mx) / z;
        }
        std::vector<int64_t> order(E);
        for (int64_t e = 0; e < E; e++) order[e] = e;
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
        *min_margin = std::min(*min_margin, s[order[k - 1]] - s[order[k]]);
        double sum = 0;
        for (int64_t j = 0; j < k; j++) sum += s[order[j]];
        for (int64_t j = 0; j < k; j++) chosen[n].push_back(order[j]), w[n].push_back(s[order[j]] / (c.moe.norm_topk ? sum : 1));
    }
    // the capacity: per sequence and expert, first choices before second ones, tokens in order
    std::vector<std::vector<char>> kept(N, std::vector<char>(k, 1));
    *dropped = 0;
    if (capacity_factor > 0) {
        const int64_t C = (int64_t)std::ceil(capacity_factor * k * T / E - 1e-9);
        for (int64_t b = 0; b < B; b++) {
            std::vector<int64_t> used(E, 0);
            for (int64_t j = 0; j < k; j++)
                for (int64_t t = 0; t < T; t++) {
                    const int64_t e = chosen[b * T + t][j];
                    if (used[e] < C) used[e]++;
                    else kept[b * T + t][j] = 0, ++*dropped;
                }
        }
    }
    auto swiglu = [&](const std::string& p, int64_t width, const double* xn) {
        const std::vector<double> g = matvec(weights_of(p + names.gate), xn, width, h);
        const std::vector<double> u = matvec(weights_of(p + names.up), xn, width, h);
        std::vector<double> act(width);
        for (int64_t i = 0; i < width; i++) act[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
        return matvec(weights_of(p + names.down), act.data(), h, width);
    };
    std::vector<double> y(N * h, 0.0);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t j = 0; j < k; j++) {
            if (!kept[n][j]) continue;
            const std::vector<double> o = swiglu(prefix + "experts." + std::to_string(chosen[n][j]) + ".", f, &x[n * h]);
            for (int64_t i = 0; i < h; i++) y[n * h + i] += w[n][j] * o[i];
        }
        if (c.moe.shared_experts > 0) {
            const std::vector<double> o = swiglu(prefix + "shared_experts.", c.moe.shared_experts * f, &x[n * h]);
            for (int64_t i = 0; i < h; i++) y[n * h + i] += o[i];
        }
    }
    return y;
}

// Mixtral's layer and a DeepSeek-style one (sigmoid scores, not renormalised, shared experts, layer 0 dense)
LlamaConfig deepseek_style() {
    LlamaConfig c = moe_config();
    c.moe.sigmoid_scores = true, c.moe.norm_topk = false, c.moe.shared_experts = 1, c.moe.first_dense = 1;
    c.moe.naming = MoeNaming::deepseek;
    return c;
}

struct LayerSetup {
    LlamaConfig cfg;
    MoeOptions opt;
    std::shared_ptr<MoeLayer> moe;
    std::unique_ptr<Model> model;
    int64_t layer, B = 3, T = 8;
    Tensor x, tokens, targets;
    MicroBatch mb;
    double G = 0;
    LayerSetup(const LlamaConfig& c, MoeOptions o, uint64_t seed) : cfg(c), opt(o) {
        moe = std::make_shared<MoeLayer>(cfg, opt, Device::cpu);
        ModelOptions mo;
        mo.mlp_core = moe;
        model = std::make_unique<Model>(cfg, Device::cpu, seed, mo);
        layer = cfg.n_layers - 1;  // a MoE layer in both models
        // a decided router (logits of order 1, not 0.1): no choice flips under the finite differences' steps
        const std::string router = cfg.moe.naming == MoeNaming::mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight";
        const ParamTensor& r = model->layout().find("model.layers." + std::to_string(layer) + "." + router);
        Tensor wr = model->params().flat(r.offset, r.numel());
        scale_inplace(wr, 20.0f);
        x = random_tensor({B * T, cfg.hidden}, seed + 1);
        tokens = random_tokens({B * T}, (int32_t)cfg.vocab, seed + 2);
        std::vector<int32_t> t = random_tokens({B * T}, (int32_t)cfg.vocab, seed + 3).to_host_i32();
        for (int64_t i = 0; i < B * T; i += 5) t[i] = -1;  // some rows without a target: the weights n_s / G differ
        targets = Tensor::from_host_i32(t, {B * T}, Device::cpu);
        for (int32_t v : t) G += v >= 0;
        G *= 2;  // another rank holds as many: the loss's denominator is the global count
        mb = MicroBatch::whole(tokens, targets, B, T);
    }
    // the layer's output y and its aux loss
    double forward(Tensor& y) {
        LayerParams w = layer_view(*model, model->params(), layer);
        return moe->forward(cfg, w, mb, G, x, y, Tag::workspace)->aux_loss;
    }
};

}  // namespace

TEST_SUITE("ch08 np1") {

TEST_CASE("MoE layer equals the dense computation of the same experts, with and without the capacity") {
    for (const LlamaConfig& c : {moe_config(), deepseek_style()})
        for (double cf : {0.0, 0.75}) {
            MoeOptions o;
            o.capacity_factor = cf;
            if (c.moe.sigmoid_scores) o.balance = MoeBalance::none;  // the balance loss wants softmax scores
            LayerSetup s(c, o, 17);
            INFO((c.moe.sigmoid_scores ? "deepseek-style" : "mixtral") << ", capacity factor " << cf);
            Tensor y;
            s.forward(y);
            int64_t dropped = 0;
            double margin = 0;
            const SwiGLUNames names = s.moe->expert_names();
            const std::vector<double> ref = dense_moe(*s.model, c, s.layer, host(s.x), s.B, s.T, cf,
                                                      c.moe.naming == MoeNaming::mixtral ? "block_sparse_moe." : "mlp.",
                                                      names, &dropped, &margin);
            REQUIRE(margin > 1e-6);  // no near tie: f32 and double choose the same experts
            const std::vector<float> ref_f(ref.begin(), ref.end());
            double scale = 0;
            for (double v : ref) scale = std::max(scale, std::abs(v));
            check_close(y.to_host(), ref_f, 0, 1e-6 * scale, "MoE output vs the dense computation");
            CHECK(scale > 0);
            if (cf > 0) CHECK(dropped > 0);  // the capacity did drop copies, so the check covers dropping
        }
}

TEST_CASE("MoE layer gradients by finite differences: router, experts, shared experts, input, the balance loss") {
    for (const LlamaConfig& c : {moe_config(), deepseek_style()}) {
        MoeOptions o;
        o.capacity_factor = 1.0;  // some copies dropped: their gradient paths are cut
        o.aux_coef = c.moe.sigmoid_scores ? 0.0 : 0.5;  // large, so its gradient shows
        if (c.moe.sigmoid_scores) o.balance = MoeBalance::none;
        INFO((c.moe.sigmoid_scores ? "deepseek-style" : "mixtral"));
        // the first seed whose choices are decided: the steps below move a score by < 1e-3, so no choice may be
        // closer than that to flipping
        std::unique_ptr<LayerSetup> setup;
        int64_t dropped = 0;
        for (uint64_t seed = 1; seed < 40 && !setup; seed++) {
            setup = std::make_unique<LayerSetup>(c, o, seed);
            double margin = 0;
            dense_moe(*setup->model, c, setup->layer, host(setup->x), setup->B, setup->T, o.capacity_factor,
                      c.moe.naming == MoeNaming::mixtral ? "block_sparse_moe." : "mlp.", setup->moe->expert_names(),
                      &dropped, &margin);
            if (margin < 3e-3) setup.reset();
        }
        REQUIRE(setup);
        LayerSetup& s = *setup;
        CHECK(dropped > 0);
        Tensor R = random_tensor({s.B * s.T, c.hidden}, 99);
        auto loss = [&] {
            Tensor y;
            const double aux = s.forward(y);
            return dot(y, R) + aux;
        };
        // analytic: backward of the same forward, the weight gradients into the model's buffer
        s.model->zero_grads();
        Tensor y;
        LayerParams w = layer_view(*s.model, s.model->params(), s.layer);
        std::unique_ptr<MlpActs> acts = s.moe->forward(c, w, s.mb, s.G, s.x, y, Tag::workspace);
        if (o.aux_coef > 0) CHECK(acts->aux_loss > 0);
        Tensor dx = s.moe->backward_input(w, *acts, R, Tag::workspace);
        LayerParams g = layer_view(*s.model, s.model->grads(), s.layer);
        s.moe->backward_weight(g, s.x, *acts);
        check_gradient(s.x, dx.to_host(), loss, "d x", 1e-3, 3e-2, 1e-3);
        const std::vector<float> grads = s.model->grads().to_host();
        const std::string L = "model.layers." + std::to_string(s.layer) + ".";
        const std::string p = c.moe.naming == MoeNaming::mixtral ? "block_sparse_moe." : "mlp.";
        std::vector<std::string> roles = {p + "gate.weight", s.moe->expert_role(1, s.moe->expert_names().gate),
                                          s.moe->expert_role(2, s.moe->expert_names().up),
                                          s.moe->expert_role(3, s.moe->expert_names().down)};
        if (c.moe.shared_experts) roles.push_back(p + "shared_experts.down_proj.weight");
        for (const std::string& role : roles) {
            const ParamTensor& t = s.model->layout().find(L + role);
            Tensor pw = s.model->params().flat(t.offset, t.numel());
            const std::vector<float> gt(grads.begin() + t.offset, grads.begin() + t.offset + t.numel());
            double gmax = 0;
            for (float v : gt) gmax = std::max(gmax, (double)std::fabs(v));
            CHECK(gmax > 0);  // the tensor learns something here: the check is not of zeros
            check_gradient(pw, gt, loss, role, 1e-3, 3e-2, 1e-3 * std::max(gmax, 1e-3));
        }
    }
}

TEST_CASE("the MoE model: finite differences through every layer, split backward equals fused, one aux per layer") {
    const LlamaConfig c = moe_config();
    MoeOptions o;
    o.aux_coef = 0.1;
    auto moe = std::make_shared<MoeLayer>(c, o, Device::cpu);
    ModelOptions mo;
    mo.mlp_core = moe;
    Model m(c, Device::cpu, 3, mo);
    const ParamLayout& L = m.layout();
    // embedding, per layer its unit and the experts' (sharded over ep), head; the layout holds every parameter
    REQUIRE(L.units.size() == (size_t)(2 * c.n_layers + 2));
    CHECK(L.units[L.layer_units[0][1]].name == "layer 0 experts");
    CHECK((L.units[L.layer_units[0][1]].sharded_on & kAxisEP));
    CHECK(L.numel == c.n_params());
    Tensor tokens = random_tokens({2 * 8}, (int32_t)c.vocab, 3), targets = random_tokens({2 * 8}, (int32_t)c.vocab, 4);
    MicroBatch mb = MicroBatch::whole(tokens, targets, 2, 8);
    auto loss = [&] {
        MicroBatchActs a = m.forward(mb, 16.0);
        return a.loss + a.aux_loss;
    };
    m.zero_grads();
    MicroBatchActs acts = m.forward(mb, 16.0);
    CHECK(acts.aux_loss > 0);
    m.backward(acts);
    const std::vector<float> g = m.grads().to_host();
    for (const char* name : {"model.layers.0.block_sparse_moe.gate.weight", "model.layers.0.block_sparse_moe.experts.1.w1.weight",
                             "model.layers.1.block_sparse_moe.experts.2.w2.weight", "model.layers.0.self_attn.q_proj.weight"}) {
        const ParamTensor& t = L.find(name);
        Tensor pw = m.params().flat(t.offset, t.numel());
        check_gradient(pw, std::vector<float>(g.begin() + t.offset, g.begin() + t.offset + t.numel()), loss, name, 1e-3,
                       5e-2, 2e-4);
    }
    // split backward equals fused, bit for bit
    Model a(c, Device::cpu, 3, mo), b(c, Device::cpu, 3, mo);
    MicroBatchActs fa = a.forward(mb, 16.0), fb = b.forward(mb, 16.0);
    a.backward(fa);
    b.backward_input(fb);
    b.backward_weight(fb);
    const std::vector<float> ga = a.grads().to_host(), gb = b.grads().to_host();
    CHECK(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)) == 0);
    // recorded once per micro-batch's backward, per MoE layer: m's, a's and b's (the core is theirs alike)
    for (int64_t i = 0; i < c.n_layers; i++) CHECK(moe->stats()[i].micro_batches == 3);
}

TEST_CASE("balancing evens out a skewed router: the balance loss's gradient alone, the bias update alone") {
    // the tokens lean the same way: x shares a direction (all ones), so the (decided) router sends most of
    // them to the same experts
    auto skewed = [](LayerSetup& s) -> const ParamTensor& {
        std::vector<float> x = s.x.to_host();
        for (float& v : x) v = 0.7f * v + 0.6f;
        s.x = Tensor::from_host(x, s.x.shape, Device::cpu);
        return s.model->layout().find("model.layers." + std::to_string(s.layer) + ".block_sparse_moe.gate.weight");
    };
    // one forward + backward of the layer (the loss: the balance loss alone, dy = 0), the load it recorded
    auto step = [](LayerSetup& s, ExpertBalanceHooks& hook) {
        s.moe->reset_stats();
        Tensor y;
        LayerParams w = layer_view(*s.model, s.model->params(), s.layer);
        std::unique_ptr<MlpActs> acts = s.moe->forward(s.cfg, w, s.mb, s.G, s.x, y, Tag::workspace);
        Tensor dy = Tensor::zeros(y.shape, DType::f32, Device::cpu, Tag::workspace);
        s.moe->backward_input(w, *acts, dy, Tag::workspace);
        LayerParams g = layer_view(*s.model, s.model->grads(), s.layer);
        s.moe->backward_weight(g, s.x, *acts);
        hook.after_update();  // the load of the step; with --moe-balance bias, the update
        return max_violation(hook.last_step().routed[s.layer]);
    };
    {
        MoeOptions o;
        o.aux_coef = 1.0;
        LayerSetup s(moe_config(), o, 3);
        const ParamTensor& r = skewed(s);
        ExpertBalanceHooks hook(*s.moe, nullptr);
        const double before = step(s, hook);
        double after = before;
        for (int i = 0; i < 60; i++) {  // plain gradient descent on the router, from the balance loss only
            s.model->zero_grads();
            after = step(s, hook);
            Tensor wr = s.model->params().flat(r.offset, r.numel());
            add_inplace(wr, s.model->grads().flat(r.offset, r.numel()), -0.5f);
        }
        INFO("balance loss: MaxVio " << before << " -> " << after);
        CHECK(before > 0.5);
        CHECK(after < 0.3 * before);
    }
    {
        MoeOptions o;
        o.balance = MoeBalance::bias;
        o.bias_rate = 0.005;
        LayerSetup s(moe_config(), o, 3);
        skewed(s);
        ExpertBalanceHooks hook(*s.moe, nullptr);
        const double before = step(s, hook);
        const std::vector<double> load = hook.last_step().routed[s.layer];
        const int64_t busiest = std::max_element(load.begin(), load.end()) - load.begin();
        const std::vector<float> w0 = s.model->params().to_host();
        double after = before;
        for (int i = 0; i < 60; i++) after = step(s, hook);
        INFO("bias: MaxVio " << before << " -> " << after);
        CHECK(before > 0.5);
        CHECK(after < 0.3 * before);
        CHECK(s.moe->bias(s.layer).to_host()[busiest] < 0);  // the overloaded expert was made less attractive...
        CHECK(s.model->params().to_host() == w0);  // ...by the bias alone: no weight moved
    }
}

TEST_CASE("balance loss: a router with equal scores for every expert scores exactly 1 per sequence (E / (k T))") {
    // Switch's B_s = E / (k T) sum_e count_e · mean score_e: with every score 1/E and the kT choices in some
    // experts, B_s = (1 / (k T)) sum_e count_e = 1, whichever experts the ties pick. The layer's aux loss is
    // aux_coef · sum_s (n_s / G) B_s = sum_s n_s / G = 1/2 here (G counts another rank's targets too).
    // A per-choice factor E / T (k times too large) gives k / 2.
    MoeOptions o;
    o.aux_coef = 1.0;
    LayerSetup s(moe_config(), o, 3);
    REQUIRE(s.cfg.moe.top_k >= 2);
    const ParamTensor& r = s.model->layout().find("model.layers." + std::to_string(s.layer) + ".block_sparse_moe.gate.weight");
    Tensor wr = s.model->params().flat(r.offset, r.numel());
    scale_inplace(wr, 0.0f);  // every logit 0: every score 1/E
    Tensor y;
    const double aux = s.forward(y);
    CHECK(aux == doctest::Approx(0.5).epsilon(1e-6));
    o.aux_coef = 0.25;  // the coefficient scales it
    LayerSetup q(moe_config(), o, 3);
    const ParamTensor& rq = q.model->layout().find("model.layers." + std::to_string(q.layer) + ".block_sparse_moe.gate.weight");
    Tensor wq = q.model->params().flat(rq.offset, rq.numel());
    scale_inplace(wq, 0.0f);
    CHECK(q.forward(y) == doctest::Approx(0.125).epsilon(1e-6));
}

TEST_CASE("capacity: per sequence, first choices before second ones, tokens in order; rows sorted by expert") {
    // 2 sequences of 4 tokens, k 2, E 3; capacity factor 0.75 -> ceil(0.75 · 2 · 4 / 3) = 2 copies per expert
    const std::vector<int32_t> ex = {0, 1, 0, 2, 0, 1, 0, 2,   // sequence 0: expert 0 is everyone's first choice
                                     2, 1, 1, 2, 1, 0, 2, 0};  // sequence 1
    const DispatchPlan p = plan_dispatch(ex, 2, 4, 2, 3, 0.75);
    CHECK(p.capacity == 2);
    CHECK(expert_capacity(1.0, 2, 6, 4) == 3);
    CHECK(expert_capacity(0, 2, 6, 4) == -1);
    // sequence 0: expert 0 takes the first choices of tokens 0 and 1 and drops those of 2 and 3; the second
    // choices fit (expert 1: tokens 0, 2; expert 2: tokens 1, 3). Sequence 1: the first choices fill experts 1
    // (tokens 1, 2) and 2 (tokens 0, 3), so the second choices of tokens 0 (expert 1) and 1 (expert 2) are
    // dropped; expert 0 takes tokens 2 and 3's second choices.
    CHECK(p.routed == std::vector<int64_t>{6, 5, 5});
    CHECK(p.kept == std::vector<int64_t>{4, 4, 4});
    CHECK(p.dropped() == 4);
    const std::vector<int32_t> want = {0, 4, 1, 8, -1, 5, -1, 9,   // expert 0 rows 0-3, expert 1 rows 4-7, 2 rows 8-11
                                       10, -1, 6, -1, 7, 2, 11, 3};
    CHECK(p.pos == want);
    const DispatchPlan all = plan_dispatch(ex, 2, 4, 2, 3, 0);  // no capacity: nothing dropped
    CHECK(all.dropped() == 0);
    CHECK(all.rows() == 16);
    CHECK(contains(error_of([&] { plan_dispatch({0, 3}, 1, 1, 2, 3, 0); }), "chose expert 3 of 3"));
}

TEST_CASE("capacity: per sequence, when f k T / E is not a whole number the capacity rounds up") {
    // 1 sequence of 5 tokens, k 2, E 3, factor 1: f k T / E = 10/3, so 4 copies per expert (3 when truncated).
    // Every token picks expert 0 first and expert 1 second: each keeps tokens 0-3 and drops token 4's copy.
    CHECK(expert_capacity(1.0, 2, 5, 3) == 4);
    CHECK(expert_capacity(1.25, 1, 6, 4) == 2);  // 1.875
    CHECK(expert_capacity(0.5, 2, 7, 4) == 2);   // 1.75
    const std::vector<int32_t> ex = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    const DispatchPlan p = plan_dispatch(ex, 1, 5, 2, 3, 1.0);
    CHECK(p.capacity == 4);
    CHECK(p.routed == std::vector<int64_t>{5, 5, 0});
    CHECK(p.kept == std::vector<int64_t>{4, 4, 0});
    CHECK(p.dropped() == 2);
    CHECK(p.pos == std::vector<int32_t>{0, 4, 1, 5, 2, 6, 3, 7, -1, -1});
    // two sequences of 3 tokens, k 1, E 2, factor 1: ceil(1.5) = 2 per expert and sequence, counted afresh in
    // each: sequence 0 sends all three to expert 1 (token 2 dropped), sequence 1 too (token 5 dropped)
    const DispatchPlan q = plan_dispatch({1, 1, 1, 1, 1, 1}, 2, 3, 1, 2, 1.0);
    CHECK(q.capacity == 2);
    CHECK(q.kept == std::vector<int64_t>{0, 4});
    CHECK(q.pos == std::vector<int32_t>{0, 1, -1, 2, 3, -1});
}

TEST_CASE("MoE options and layers are checked: aux with sigmoid scores, a dense model, bad values") {
    MoeOptions o;
    LlamaConfig c = moe_config();
    c.moe.sigmoid_scores = true;
    CHECK(contains(error_of([&] { MoeLayer m(c, o, Device::cpu); }), "--moe-balance bias"));
    CHECK(contains(error_of([&] { MoeLayer m(preset("tiny"), o, Device::cpu); }), "has no experts"));
    o.capacity_factor = -1;
    CHECK(contains(error_of([&] { MoeLayer m(moe_config(), o, Device::cpu); }), "--moe-capacity -1"));
    CHECK(parse_moe_balance("bias") == MoeBalance::bias);
    CHECK(contains(error_of([] { parse_moe_balance("loss"); }), "--moe-balance loss"));
    // a dense chapter's model refuses a MoE config
    CHECK(contains(error_of([] { Model m(moe_config(), Device::cpu, 1); }), "chapter 08's MoE layer"));
}

}  // TEST_SUITE
