// test_fp16_failures.cpp — the two failures of plain fp16 training that its remedies exist for (seed 003 §6:
// "small gradients underflow -> loss scaling; small updates are swamped -> an fp32 master copy"), shown on the
// model's real numbers rather than assumed:
//   1. underflow: the gradients of one real step of `small` (on English words) stored in f16, as fp16 training
//      with f16 gradients keeps them. Without a scale, every nonzero gradient under 2^-25 becomes 0 (f16's
//      smallest subnormal is 2^-24); scaled by 2^12 first (loss scaling: the same factor on the loss), fewer
//      than a tenth of those are lost, and none overflows. This code keeps gradients in f32 (only the GEMM
//      inputs are rounded: ARCHITECTURE.md §5), so the test stores them in f16 itself.
//   2. swamping: AdamW steps of lr 1e-4 on the same model's weights (its RMSNorm weights start at 1.0) with the
//      weights held in f16 and no master: an update smaller than half of f16's spacing at the weight rounds
//      away, every step, so those weights never move — all the norm weights among them (spacing below 1.0 is
//      2^-11, half of it 2.4e-4 > 1e-4). With the f32 master (AdamW's fp32_master, what chapter 11 trains
//      with) the same steps accumulate in f32, and after 10 steps the f16 weights are the master's rounding:
//      the norm weights all moved.
// Playbook: "Mixed precision training" (loss scaling, FP32 master weights). Run: `make test CH=11`, or
//   build/bin/tests_11 -ts='ch11 np1' -tc='fp16 without*'
#include <cmath>

#include "../../common/training_step.hpp"
#include "../01_single_gpu/words_dataset.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

// `small` (fp32) and the gradients of one real step on English words: the model after the step (lr 0), the
// gradients in its flat buffer
struct RealStep {
    LlamaConfig cfg = preset("small");
    Model model{cfg, Device::cpu, 7};
    std::vector<float> grads;
    RealStep() {
        auto data = words_dataset((int32_t)cfg.vocab);
        std::unique_ptr<AdamW> opt = make_adamw(model, AdamWConfig{});
        BatchPlan plan;
        plan.seq = 32, plan.micro_batch = 16, plan.global_batch = 16;
        training_step(model, *opt, *data, 0, plan, 0.0f, 1e9f);  // lr 0: the weights stay, the gradients are kept
        grads = model.grads().to_host();
    }
};

std::vector<float> as_f16(const std::vector<float>& x, float scale) {  // f16(x · scale), back in f32
    std::vector<float> s(x.size());
    for (size_t i = 0; i < x.size(); i++) s[i] = x[i] * scale;
    return Tensor::from_host(s, {(int64_t)s.size()}, Device::cpu, Tag::workspace, DType::f16).to_host();
}

}  // namespace

TEST_SUITE("ch11 np1") {

TEST_CASE("fp16 without loss scaling flushes real gradients to zero; scaled by 2^12 they survive") {
    RealStep real;
    const std::vector<float> unscaled = as_f16(real.grads, 1.0f), scaled = as_f16(real.grads, 4096.0f);
    int64_t nonzero = 0, lost = 0, lost_scaled = 0, overflow = 0, subnormal = 0;
    float biggest = 0;
    for (size_t i = 0; i < real.grads.size(); i++) {
        if (real.grads[i] == 0) continue;  // rows of tokens not in the batch: zero in f32 already
        nonzero++;
        biggest = std::max(biggest, std::abs(real.grads[i]));
        lost += unscaled[i] == 0;
        lost_scaled += scaled[i] == 0;
        overflow += std::isinf(scaled[i]);
        subnormal += std::abs(real.grads[i]) < 0x1p-14f;  // f16's smallest normal: fewer mantissa bits below it
    }
    MESSAGE("small, one step on words: " << nonzero << " nonzero f32 gradients, the largest " << biggest << "; in f16 "
                                         << lost << " become 0 and " << subnormal << " subnormal without scaling, "
                                         << lost_scaled << " become 0 at scale 2^12");
    // playbook: 003.6.1 — f16 without scaling flushes nonzero real gradients to 0; the loss scale keeps >90 % of them
    CHECK(lost > 0);
    CHECK(lost_scaled * 10 < lost);
    CHECK(overflow == 0);  // 2^12 is small enough for the largest: the scale only lifts the small ones
    CHECK(biggest * 4096.0f < 65504.0f);
}

TEST_CASE("fp16 without an fp32 master swamps small updates: the norm weights never move; with the master they do") {
    RealStep real;
    const int64_t n = real.model.params().numel();
    const Tensor g = Tensor::from_host(real.grads, {n}, Device::cpu);  // the same real gradient every step
    const std::vector<float> start = as_f16(real.model.params().to_host(), 1.0f);  // f16 weights, as stored
    const AdamWConfig cfg{1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f};
    // no master: f32 arithmetic on the f16 weights, the result stored back in f16 after every step
    Tensor plain = Tensor::from_host(start, {n}, Device::cpu, Tag::params);
    AdamW no_master(plain, g, {}, cfg);
    // the master: f16 weights, AdamW steps an f32 copy and writes its rounding
    Tensor half = Tensor::from_host(start, {n}, Device::cpu, Tag::params, DType::f16);
    AdamW mixed(half, g, {}, cfg, true);
    for (int s = 0; s < 10; s++) {
        no_master.step(cfg.lr, 1.0f);
        copy(plain, Tensor::from_host(as_f16(plain.to_host(), 1.0f), {n}, Device::cpu));
        mixed.step(cfg.lr, 1.0f);
    }
    const std::vector<float> a = plain.to_host(), b = half.to_host();
    int64_t norms = 0, norms_stuck = 0, norms_moved_master = 0, stuck = 0, stuck_master = 0, stepped = 0;
    for (int64_t i = 0; i < n; i++) {
        if (real.grads[i] == 0) continue;  // AdamW does not move these (no weight decay here)
        stepped++;
        stuck += a[i] == start[i];
        stuck_master += b[i] == start[i];
        if (start[i] == 1.0f) {  // the RMSNorm weights (nothing else starts at exactly 1)
            norms++;
            norms_stuck += a[i] == 1.0f;
            norms_moved_master += b[i] != 1.0f;
        }
    }
    MESSAGE("10 AdamW steps of lr 1e-4 on small's f16 weights: without a master " << stuck << " of " << stepped
            << " weights never moved (" << norms_stuck << " of " << norms << " norm weights); with the f32 master "
            << stuck_master);
    REQUIRE(norms == 2 * real.cfg.n_layers * real.cfg.hidden + real.cfg.hidden);
    // playbook: 003.6.1 — without a master every norm weight's update is swamped (10 steps, none moves); with it all
    //   move
    CHECK(norms_stuck == norms);
    CHECK(norms_moved_master == norms);
    CHECK(stuck_master * 10 < stuck);
}

}  // TEST_SUITE
