// test_hfu.cpp — HFU beside MFU: the FLOPs recomputation adds (metrics.hpp recompute_flops_per_token) against
// the playbook's independent count of a GPT layer (formulas.hpp) and against the FLOPs the op layer counts
// while one training step runs (ops.hpp counted_flops), and the step line / JSON that report it.
//
// Playbook: "Activation recomputation" (HFU counts the recomputed FLOPs, MFU does not); seeds 000 and 003.
//   make test CH=01     or     build/bin/tests_01 -ts='ch01 np1' -tc='HFU*'
#include <nlohmann/json.hpp>

#include "../../common/formulas.hpp"
#include "../../common/metrics.hpp"
#include "../../common/ops.hpp"
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
    // playbook: 003.5.5 — recomputed FLOPs of a GPT-shaped layer: the playbook's count (full), half of it (selective)
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

TEST_CASE("HFU: one step's counted FLOPs are the model's (none) plus recompute_flops_per_token x tokens") {
    // The op layer counts every GEMM it runs (linear layers and attention) while a real training step runs under
    // each --recompute mode; the formulas must then be the counts: none with the naive kernel exactly 6 N + 12 L h T
    // a token, each other mode exactly recompute_flops_per_token more. Integers all the way (exact in a double)
    LlamaConfig mc = preset("tiny");
    mc.vocab = kByteVocab;
    auto data = make_dataset("addition", 1, (int32_t)kByteVocab);
    BatchPlan plan;
    plan.seq = 32, plan.micro_batch = 2, plan.grad_accum = 2, plan.global_batch = 4;
    const double tokens = (double)(plan.global_batch * plan.seq);
    const int64_t h = mc.n_heads * mc.head_dim();
    const int64_t layer = llama_layer_param_count(mc.hidden, mc.n_heads, mc.n_kv_heads, mc.ffn, mc.head_dim()) -
                          2 * mc.hidden;                                  // a layer's matmul weights (no norms)
    const int64_t matmul_params = mc.n_layers * layer + mc.vocab * mc.hidden;  // + lm_head; the lookup is no matmul
    const double model = model_flops_per_token(matmul_params, mc.n_layers, h, plan.seq) * tokens;
    for (const char* kernel : {"naive", "flash"}) {
        double counted_none = 0;
        for (const char* mode : {"none", "selective", "full", "offload"}) {
            TrainConfig cfg;
            cfg.recompute = mode, cfg.attention = kernel, cfg.seq = plan.seq;
            Model m(mc, Device::cpu, 1, model_options(cfg));
            std::unique_ptr<AdamW> opt = make_adamw(m, AdamWConfig{});
            Trainer t{m, *opt};
            TrainLoop loop{t, *data, cfg, plan, StepLogConfig{}, {}, {}};
            configure_log(loop, mc, Device::cpu, 1);  // what the program prints MFU from
            reset_counted_flops();
            training_step(t, *data, 0, plan, 1e-3f, 1.0f);
            const FlopCount c = counted_flops();
            const Recompute r = parse_recompute(mode);
            const double extra = recompute_flops_per_token(r, std::string(kernel) == "naive", layer, mc.n_layers, h,
                                                           plan.seq) * tokens;
            if (r == Recompute::none) counted_none = (double)c.total();
            INFO(std::string(mode) << ", " << std::string(kernel) << ": counted " << c.total() << " FLOPs (linear " << c.linear
                                   << ", attention " << c.attention << "), model " << model << " + recompute " << extra
                                   << "; vs none " << (double)c.total() / counted_none);
            // playbook: 000.01.2 000.02.11 000.02.12 000.02.14 003.5.2 003.5.5 — a step's FLOPs counted by the ops =
            //   the model's + recompute_flops_per_token x tokens
            CHECK((double)c.total() == model + extra);  // naive: none adds 0, so the differences are the formula's
            CHECK(loop.log.flops_per_token * tokens == model);  // the MFU numerator of every chapter's step line
            // the linear layers alone: 6 N (forward, input and weight gradients), and a layer's forward again (full)
            CHECK((double)c.linear == 6.0 * (double)matmul_params * tokens +
                                          (r == Recompute::full ? 2.0 * (double)(mc.n_layers * layer) * tokens : 0.0));
        }
    }
    // appendix B: forward 2 FLOPs per parameter and token (+ attention), backward twice the forward — exactly, with
    // the naive kernel keeping its probabilities (nothing rebuilt)
    TrainConfig cfg;
    cfg.attention = "naive", cfg.seq = plan.seq;
    Model m(mc, Device::cpu, 1, model_options(cfg));
    const std::vector<MicroBatch> mbs = make_micro_batches(*data, 0, plan, Device::cpu);
    reset_counted_flops();
    MicroBatchActs a = m.forward(mbs[0], tokens);
    const int64_t forward = counted_flops().total();
    m.backward(a);
    const double mb_tokens = (double)(plan.micro_batch * plan.seq);
    CHECK((double)forward == (2.0 * (double)matmul_params + 4.0 * (double)(mc.n_layers * h * plan.seq)) * mb_tokens);
    // playbook: 000.B.4 — a forward is (2N + 4LhT) a token, its backward exactly twice that
    CHECK(counted_flops().total() - forward == 2 * forward);
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
    // playbook: 000.02.14 003.5.5 — HFU = MFU x hardware / model FLOPs
    CHECK(j["hfu"].get<double>() == doctest::Approx(1.5 * j["mfu"].get<double>()));
    // a record that carries the FLOPs its rank's ops counted: HFU from them (per device: 4e9 in 0.5 s at 1e12)
    r.hardware_flops = 4e9;
    CHECK(log.line(r).find("MFU 0.4% | HFU 0.8%") != std::string::npos);
    CHECK(nlohmann::json::parse(log.json_line(r))["flops_counted"].get<double>() == 4e9);
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
            INFO(std::string(mode) << " " << kernel);
            if (r == Recompute::none)
                CHECK(loop.log.hardware_flops_per_token == 0);  // not reported: the default line stays as it was
            else
                CHECK(loop.log.hardware_flops_per_token == doctest::Approx(loop.log.flops_per_token + extra));
        }
}

}  // TEST_SUITE
