// test_hfu.cpp — HFU beside MFU: the FLOPs recomputation adds (metrics.hpp recompute_flops_per_token) against
// the playbook's independent count of a GPT layer (formulas.hpp), and the step line / JSON that report it.
//
// Playbook: "Activation recomputation" (HFU counts the recomputed FLOPs, MFU does not); seeds 000 and 003.
//   make test CH=01     or     build/bin/tests_01 -ts='ch01 np1' -tc='HFU*'
#include <nlohmann/json.hpp>

#include "../../common/formulas.hpp"
#include "../../common/metrics.hpp"
#include "../../common/train_loop.hpp"
#include "../testing.hpp"

using namespace penta;

TEST_SUITE("ch01 np1") {

TEST_CASE("HFU: the recomputed FLOPs of a GPT-shaped layer equal the playbook's count (full), half of it (selective)") {
    // A Llama layer with MHA and a SwiGLU of f = 8h/3 has 12 h^2 matmul weights, as GPT's 4h^2 + 8h^2: then our
    // count and Korthikanti et al.'s (24 b s h^2 + 4 b s^2 h a forward) must agree term by term
    const int64_t h = 384, nh = 6, f = 1024, s = 256, b = 2;
    const int64_t layer = llama_layer_param_count(h, nh, nh, f) - 2 * h;  // the two norm weights are no matmul
    REQUIRE(layer == 12 * h * h);
    const double tokens = (double)(b * s);
    // full, naive kernel: the block's forward again, probabilities kept by the rerun
    CHECK(recompute_flops_per_token(Recompute::full, true, layer, 1, h, s) * tokens ==
          doctest::Approx(playbook_recompute_flops_per_layer(Recompute::full, s, b, h)));
    // selective: the backward rebuilds P = softmax(Q K^T) from q, k and the lse — Q K^T only (2 b s^2 h); the
    // playbook counts Q K^T and P V (4 b s^2 h), but the backward needs P, not P V
    CHECK(recompute_flops_per_token(Recompute::selective, true, layer, 1, h, s) * tokens ==
          doctest::Approx(playbook_recompute_flops_per_layer(Recompute::selective, s, b, h) / 2));
    // none with the naive kernel: nothing; with flash the backward always rebuilds P (none == selective)
    CHECK(recompute_flops_per_token(Recompute::none, true, layer, 1, h, s) == 0);
    CHECK(recompute_flops_per_token(Recompute::none, false, layer, 1, h, s) ==
          recompute_flops_per_token(Recompute::selective, false, layer, 1, h, s));
    // full with flash: the forward again, and P rebuilt in the backward as flash always does
    CHECK(recompute_flops_per_token(Recompute::full, false, layer, 1, h, s) ==
          doctest::Approx(recompute_flops_per_token(Recompute::full, true, layer, 1, h, s) + 2.0 * h * s));
    // against the model's own FLOPs (6 P + 12 h T a layer): full recomputation adds one third of the
    // layers' work, as seed 003 says
    const double model = model_flops_per_token(layer, 1, h, s);
    CHECK(recompute_flops_per_token(Recompute::full, true, layer, 1, h, s) / model == doctest::Approx(1.0 / 3));
}

TEST_CASE("HFU: printed beside MFU when recomputation runs, by the ratio of hardware to model FLOPs") {
    Tensor w = Tensor::zeros({1024}, DType::f32, Device::cpu, Tag::params);
    StepLogConfig cfg;
    cfg.flops_per_token = 1e6;
    cfg.peak_flops = 1e12;
    cfg.num_devices = 2;
    cfg.print = false;
    StepRecord r;
    r.step = 1, r.total_steps = 2, r.tokens = 4000, r.seconds = 0.5;  // MFU 0.4%
    {
        StepLog log(cfg);  // no recomputation: the line of every chapter's README, unchanged
        CHECK(log.line(r).find("MFU 0.4%") != std::string::npos);
        CHECK(log.line(r).find("HFU") == std::string::npos);
        CHECK(nlohmann::json::parse(log.json_line(r)).count("hfu") == 0);
    }
    cfg.hardware_flops_per_token = 1.5e6;
    StepLog log(cfg);
    CHECK(log.line(r).find("MFU 0.4% | HFU 0.6%") != std::string::npos);
    const auto j = nlohmann::json::parse(log.json_line(r));
    CHECK(j["hfu"].get<double>() == doctest::Approx(1.5 * j["mfu"].get<double>()));
}

TEST_CASE("HFU: configure_log counts --recompute's FLOPs for the model it trains") {
    LlamaConfig mc = preset("tiny");
    auto data = make_dataset("addition", 1, (int32_t)kByteVocab);
    mc.vocab = kByteVocab;
    for (const char* mode : {"none", "selective", "full"})
        for (const char* kernel : {"naive", "flash"}) {
            TrainConfig cfg;
            cfg.recompute = mode;
            cfg.attention = kernel;
            cfg.seq = 32;
            Model model(mc, Device::cpu, 1, model_options(cfg));
            AdamW optim(model.params(), model.grads(), optimizer_ranges(model), AdamWConfig{}, false);
            Trainer trainer{model, optim};
            TrainLoop loop{trainer, *data, cfg, BatchPlan{}, StepLogConfig{}, {}, {}};
            configure_log(loop, mc, Device::cpu, 1);
            const Recompute r = parse_recompute(mode);
            const int64_t layer = llama_layer_param_count(mc.hidden, mc.n_heads, mc.n_kv_heads, mc.ffn) - 2 * mc.hidden;
            const double extra = recompute_flops_per_token(r, std::string(kernel) == "naive", layer, mc.n_layers,
                                                           mc.n_heads * mc.head_dim(), cfg.seq);
            INFO(mode << " " << kernel);
            if (r == Recompute::none)
                CHECK(loop.log.hardware_flops_per_token == 0);  // not reported: the default line stays as it was
            else
                CHECK(loop.log.hardware_flops_per_token == doctest::Approx(loop.log.flops_per_token + extra));
        }
}

}  // TEST_SUITE
