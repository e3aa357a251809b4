// test_loss_scaler.cpp — fp16's dynamic loss scaling (11_mixed_precision/loss_scaler.hpp): the state machine alone
// (overflow -> skip + halve, growth after N clean steps, the counter reset by an overflow, the floor), then
// inside training_step: a scale far too large overflows the f16 GEMM inputs, the step is skipped with the
// weights untouched, and the scale halves until the gradients fit; and a MoE model's balance loss under loss
// scaling: its gradient scaled with the loss's (bitwise the unscaled training), fp16 training with it.
// Playbook: "Mixed precision training" (loss scaling). Run: `make test CH=11` (build/bin/tests_11 -tc='*scaler*').
#include <cmath>

#include "../../11_mixed_precision/loss_scaler.hpp"
#include "../04_tensor_parallel/tp_testing.hpp"
#include "../08_expert_parallel/ep_testing.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::tp_testing;

TEST_SUITE("ch11 np1") {

TEST_CASE("loss scaler: overflow skips and halves, N clean steps double, an overflow restarts the count") {
    LossScaler s(LossScalerConfig{1024.0f, 0.5f, 2.0f, 3});
    CHECK(s.scale() == 1024.0f);
    CHECK(s.update(true));
    CHECK(s.update(true));
    CHECK(s.scale() == 1024.0f);  // two clean steps: not yet
    CHECK(s.update(true));
    CHECK(s.scale() == 2048.0f);  // the third: grow
    CHECK(s.clean_steps() == 0);
    CHECK(s.update(true));
    CHECK(s.update(true));
    // playbook: 000.12.8 — dynamic loss scaling: an overflow skips the step and halves the scale
    CHECK_FALSE(s.update(false));  // overflow: skip this step...
    CHECK(s.scale() == 1024.0f);   // ...and back off
    CHECK(s.skipped() == 1);
    CHECK(s.clean_steps() == 0);   // the two clean steps before it no longer count
    CHECK(s.update(true));
    CHECK(s.update(true));
    CHECK(s.scale() == 1024.0f);
    CHECK(s.update(true));
    CHECK(s.scale() == 2048.0f);
    LossScaler tiny(LossScalerConfig{0x1p-23f, 0.5f, 2.0f, 3});
    CHECK_FALSE(tiny.update(false));  // 2^-24: still allowed
    CHECK(contains(error_of([&] { tiny.update(false); }), "overflow even at loss scale"));
    CHECK(contains(error_of([&] { LossScaler(LossScalerConfig{1.0f, 2.0f, 2.0f, 3}); }), "backoff 2 in (0, 1)"));
}

TEST_CASE("loss scaler in training_step: f16 gradients overflow at scale 2^40, steps are skipped, weights untouched, until it fits") {
    const LlamaConfig cfg = tp_config(64);
    RandomTokens data((int32_t)cfg.vocab);
    ModelOptions o;
    o.precision = Precision::named("fp16");
    Model m(cfg, Device::cpu, kModelSeed, o);
    std::unique_ptr<AdamW> opt = make_adamw(m, kAdamW);
    LossScaler scaler(LossScalerConfig{0x1p40f, 0.5f, 2.0f, 1000});
    Trainer t{m, *opt};
    BatchPlan plan;
    plan.seq = 16, plan.micro_batch = 4, plan.global_batch = 4;
    CHECK(contains(error_of([&] { training_step(t, data, 0, plan, kAdamW.lr, kClip); }),
                   "needs chapter 11's LossScaler"));
    t.hooks.push_back(&scaler);
    // the reference loss of step 1: the same model in f16 without a scale that overflows
    Model ref(cfg, Device::cpu, kModelSeed, o);
    std::unique_ptr<AdamW> ref_opt = make_adamw(ref, kAdamW);
    LossScaler ref_scaler(LossScalerConfig{1.0f, 0.5f, 2.0f, 1000});
    Trainer rt{ref, *ref_opt};
    rt.hooks.push_back(&ref_scaler);
    const StepResult want = training_step(rt, data, 0, plan, kAdamW.lr, kClip);
    REQUIRE_FALSE(want.skipped);

    int skipped = 0;
    StepResult r;
    for (int s = 0; s < 40; s++) {
        const std::vector<float> before = m.params().to_host();
        r = training_step(t, data, 0, plan, kAdamW.lr, kClip);  // the same batch each time
        CHECK(r.loss_scale == std::ldexp(1.0f, 40 - skipped));
        CHECK(std::abs(r.loss - want.loss) <= 1e-5 * want.loss);  // the loss is reported unscaled
        if (!r.skipped) break;
        skipped++;
        CHECK(m.params().to_host() == before);  // no update on a skipped step
        CHECK(scaler.scale() == std::ldexp(1.0f, 40 - skipped));
    }
    MESSAGE("skipped " << skipped << " steps; the gradients fit at loss scale " << r.loss_scale);
    // playbook: 000.12.8 — in a training step: overflowing f16 gradients skip steps, weights untouched, until the
    //   scale fits
    CHECK(skipped >= 10);  // 2^40 really overflowed f16
    CHECK_FALSE(r.skipped);
    CHECK(scaler.skipped() == skipped);
    // the unscaled norm of the step that went through is the norm at scale 1 (rounding apart: a larger scale
    // keeps small gradients that f16 flushes to zero at scale 1, so a little larger, not smaller)
    CHECK(std::isfinite(r.grad_norm));
    CHECK(std::abs(r.grad_norm - want.grad_norm) <= 0.05 * want.grad_norm);
}

TEST_CASE("loss scaling with a MoE balance loss: its gradient is S times too (bitwise the unscaled run), fp16 trains with it") {
    const LlamaConfig cfg = ep_testing::moe_config();
    RandomTokens data((int32_t)cfg.vocab);
    BatchPlan plan;
    plan.seq = 8, plan.micro_batch = 4, plan.global_batch = 4;
    struct Trained {
        std::vector<double> losses, aux;
        std::vector<float> params;
    };
    // 4 steps of the MoE model (balance loss, coefficient 0.01) under `precision`, loss scale `scale` (0: none)
    const auto train = [&](const char* precision, float scale) {
        auto moe = std::make_shared<MoeLayer>(cfg, MoeOptions{}, Device::cpu);
        ModelOptions o;
        o.mlp_core = moe;
        o.precision = Precision::named(precision);
        Model m(cfg, Device::cpu, kModelSeed, o);
        std::unique_ptr<AdamW> opt = make_adamw(m, kAdamW);
        ExpertBalanceHooks balance(*moe, nullptr);
        LossScaler scaler(LossScalerConfig{scale > 0 ? scale : 1.0f, 0.5f, 2.0f, 1000});
        Trainer t{m, *opt, {&balance}};
        if (scale > 0) t.hooks.push_back(&scaler);
        Trained r;
        for (int s = 0; s < 4; s++) {
            const StepResult x = training_step(t, data, s, plan, kAdamW.lr, kClip);
            CHECK_FALSE(x.skipped);
            r.losses.push_back(x.loss);
            r.aux.push_back(x.aux_loss);
        }
        r.params = m.params().to_host();
        return r;
    };
    // in f32, a power-of-two scale is exact: scaling the loss gradient and dividing the update by S changes no
    // bit, if the balance loss's gradient is scaled with the loss's (unscaled, the router would learn 1/S of it)
    const Trained plain = train("fp32", 0), scaled = train("fp32", 4096);
    REQUIRE(plain.aux[0] > 0);
    CHECK(scaled.aux == plain.aux);  // reported unscaled
    CHECK(scaled.losses == plain.losses);
    CHECK(scaled.params == plain.params);
    const Trained half = train("fp16", 65536);
    for (size_t s = 0; s < plain.aux.size(); s++) {
        INFO("step " << s + 1 << ": fp16 aux " << half.aux[s] << " loss " << half.losses[s] << ", fp32 aux "
             << plain.aux[s] << " loss " << plain.losses[s]);
        CHECK(std::abs(half.aux[s] - plain.aux[s]) <= 0.02 * plain.aux[s]);
        CHECK(std::abs(half.losses[s] - plain.losses[s]) <= 0.02 * plain.losses[s]);
    }
}

}  // TEST_SUITE
