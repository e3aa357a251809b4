// test_cores.cpp — cores declare their weights (spine.hpp): an MLP core that is not the dense SwiGLU brings
// tensors of its own, in a unit of its own with its own parallelism (what a MoE core's experts need), and
// an auxiliary loss; the layout, the backward (fused and split), the gradient sink and the step all follow
// without a change to the model.
// Playbook: "Expert parallelism" (the seam it will use). Run: `make test CH=01`.
#include <cstring>

#include "../../common/training_step.hpp"
#include "../testing.hpp"
#include "cores_testing.hpp"

using namespace penta;
using namespace penta::testing;


TEST_SUITE("ch01 np1") {

TEST_CASE("cores declare their weights: an MLP core with a unit of its own, its parallelism, its aux loss") {
    LlamaConfig cfg = preset("tiny");
    cfg.vocab = kByteVocab;  // it reads the addition task
    ModelOptions o;
    o.mlp_core = std::make_shared<penta::testing::TwoMlps>();
    Model m(cfg, Device::cpu, 9, o);
    const ParamLayout& L = m.layout();
    // embedding, then per layer its own unit and the core's, then the head; contiguous, layer-major
    REQUIRE(L.units.size() == (size_t)(2 * cfg.n_layers + 2));
    for (int64_t i = 0; i < cfg.n_layers; i++) {
        REQUIRE(L.layer_units[i].size() == 2);
        const ParamUnit& extra = L.units[L.layer_units[i][1]];
        CHECK(extra.name == strfmt("layer %lld extra", (long long)i));
        CHECK(extra.layer == i);
        CHECK(L.layer_units[i][1] == L.layer_units[i][0] + 1);
        const ParamTensor& t = L.find(strfmt("model.layers.%lld.extra.up_proj.weight", (long long)i));
        CHECK(t.unit == L.layer_units[i][1]);
        CHECK((t.sharded_on & kAxisEP));
        CHECK(!(L.find(strfmt("model.layers.%lld.mlp.up_proj.weight", (long long)i)).sharded_on & kAxisEP));
    }
    int64_t at = 0;
    for (const ParamUnit& u : L.units) {
        CHECK(u.offset == at);
        at += u.numel;
    }
    CHECK(at == L.numel);
    CHECK(L.numel == cfg.n_params() + cfg.n_layers * 3 * cfg.hidden * cfg.ffn);
    // counted once in the global norm: the ep-sharded tensors by every rank of edp 0
    GridCoords c;
    c.dp = 1, c.ep = 1, c.edp = 0;
    CHECK(counts_in_grad_norm(L.find("model.layers.0.extra.up_proj.weight"), c));
    CHECK(!counts_in_grad_norm(L.find("model.layers.0.mlp.up_proj.weight"), c));

    // the backward reaches the core's own unit: finite differences on one of its weights
    Tensor tokens = random_tokens({2 * 8}, (int32_t)cfg.vocab, 3), targets = random_tokens({2 * 8}, (int32_t)cfg.vocab, 4);
    m.zero_grads();
    m.forward_backward(tokens, targets, 2, 8, 16.0);
    const ParamTensor& w = L.find("model.layers.1.extra.down_proj.weight");
    Tensor pw = m.params().flat(w.offset, w.numel());
    std::vector<float> g = m.grads().to_host();
    check_gradient(pw, std::vector<float>(g.begin() + w.offset, g.begin() + w.offset + w.numel()),
                   [&] { return m.forward_loss(tokens, targets, 2, 8, 16.0); }, "extra.down_proj", 1e-2, 5e-2, 1e-4);

    // split backward equals fused, bit for bit, with the core's unit too
    Model a(cfg, Device::cpu, 9, o), b(cfg, Device::cpu, 9, o);
    MicroBatch mb = MicroBatch::whole(tokens, targets, 2, 8);
    MicroBatchActs fa = a.forward(mb, 16.0), fb = b.forward(mb, 16.0);
    a.backward(fa);
    b.backward_input(fb);
    b.backward_weight(fb);
    std::vector<float> ga = a.grads().to_host(), gb = b.grads().to_host();
    CHECK(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)) == 0);
    CHECK(fa.aux_loss == 0.25 * cfg.n_layers);

    // the step reports the core's aux loss beside the loss
    auto data = make_dataset("addition", 1, (int32_t)cfg.vocab);
    std::unique_ptr<AdamW> opt = make_adamw(m, AdamWConfig{});
    Trainer t{m, *opt};
    BatchPlan plan;
    plan.seq = 32, plan.micro_batch = 2, plan.grad_accum = 3, plan.global_batch = 6;
    const StepResult r = training_step(t, *data, 0, plan, 1e-3f, 1.0f);
    CHECK(r.aux_loss == 3 * 0.25 * cfg.n_layers);
}

}  // TEST_SUITE
