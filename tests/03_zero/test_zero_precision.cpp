// test_zero_precision.cpp — chapter 03, what a rank holds under plain DP (stage 0) and ZeRO-1/2/3 in fp32 AND in
// bf16 mixed precision, by the allocator's tags after two training steps: weights, gradients, fp32 master and
// Adam's moments each equal formulas.hpp's zero_model_state_bytes(stage, Ψ, S, weight, gradient, master bytes)
// exactly — fp32 4/4/0, bf16 2/4/4 (this code accumulates gradients in f32: ARCHITECTURE.md §5). Beside the
// seed's bf16 form (2Ψ + 2Ψ + 12Ψ, each term / N once its stage shards it: zero_model_state_bytes_bf16) the
// only difference is the gradient's 2 extra bytes a (sharded) element. And the activations a micro-batch's
// forward keeps are the same under every stage: ZeRO shards model state, never activations.
// Playbook: "Zero Redundancy Optimizer (ZeRO)", "Mixed precision training". Run: `make test CH=03`, or
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/bin/tests_03 -ts='ch03 np2' -tc='*bf16*'
#include "../../02_data_parallel/data_parallel.hpp"
#include "../../03_zero/zero.hpp"
#include "../../common/formulas.hpp"
#include "../01_single_gpu/equivalence.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

constexpr uint64_t kSeed = 5;
const AdamWConfig kAdamW{1e-3f, 0.9f, 0.95f, 1e-6f, 0.1f};

struct Held {
    ModelStateBytes state;      // what the run's model and optimizer hold, by tag
    int64_t activations = 0;    // what the first micro-batch's forward kept
    double loss = 0;            // the last step's
};

int64_t now(Tag t) { return mem_stats(Device::cpu).current[(int)t]; }

// two steps of `tiny` (untied, byte vocabulary, the addition task) under `stage` (0: plain DP) in `precision`
Held train(Comm& dp, int stage, const std::string& precision) {
    const Tag tags[] = {Tag::params, Tag::grads, Tag::master, Tag::optim};
    int64_t before[4];
    for (int i = 0; i < 4; i++) before[i] = now(tags[i]);
    LlamaConfig c = preset("tiny");
    c.vocab = kByteVocab;
    ModelOptions o;
    o.precision = Precision::named(precision);
    auto data = make_dataset("addition", kSeed, kByteVocab);
    TrainConfig cfg;
    cfg.seq = 32;
    cfg.micro_batch = 2;
    const BatchPlan plan = data_parallel_plan(cfg, dp);
    Held h;
    auto run = [&](Model& m, AdamW& opt, StepHooks& hooks) {
        Trainer t{m, opt, {&hooks}};
        for (int64_t s = 0; s < 2; s++) {
            const StepResult r = training_step(t, *data, s, plan, kAdamW.lr, 1.0f);
            if (s == 0) h.activations = r.saved_activation_bytes;
            h.loss = r.loss;
        }
        int64_t after[4];
        for (int i = 0; i < 4; i++) after[i] = now(tags[i]) - before[i];
        h.state = ModelStateBytes{after[0], after[1], after[2], after[3]};
    };
    if (stage == 0) {
        Model m(c, Device::cpu, kSeed, o);
        AdamW opt(m.params(), m.grads(), optimizer_ranges(m.layout(), GridCoords{dp.rank()}), kAdamW,
                  m.precision().fp32_master, &dp);
        DataParallelHooks hooks(m, dp);
        run(m, opt, hooks);
    } else {
        const ZeroStage st = parse_zero_stage(stage);
        Model m(c, Device::cpu, kSeed, zero_model_options(st, o));
        ZeroHooks hooks(m, dp, st, kAdamW);
        run(m, hooks.optimizer(), hooks);
    }
    return h;
}

void check_model_state(Comm& dp) {
    LlamaConfig c = preset("tiny");
    c.vocab = kByteVocab;
    std::vector<int64_t> units;
    for (const ParamUnit& u : ParamLayout::build(c).units) units.push_back(u.numel);
    const int64_t psi = c.n_params(), S = zero_shard_numel(units, dp.size(), dp.rank());
    for (const std::string precision : {"fp32", "bf16"}) {
        const bool bf16 = precision == "bf16";
        int64_t dp_activations = 0;
        for (int stage = 0; stage <= 3; stage++) {
            CAPTURE(precision);
            CAPTURE(stage);
            CAPTURE(dp.size());
            const Held h = train(dp, stage, precision);
            REQUIRE(std::isfinite(h.loss));
            // playbook: 000.02.6 000.03.5 000.04.2 000.04.7 003.2.1 — per-rank weights/grads/master/Adam bytes by the
            //   allocator = the formula
            const ModelStateBytes want = zero_model_state_bytes(stage, psi, S, bf16 ? 2 : 4, 4, bf16 ? 4 : 0);
            CHECK(h.state.params == want.params);
            CHECK(h.state.grads == want.grads);
            CHECK(h.state.master == want.master);
            CHECK(h.state.optim == want.optim);
            if (bf16) {  // the seed's bf16 form keeps bf16 gradients: ours are f32, 2 bytes more an element held
                const ModelStateBytes seed = zero_model_state_bytes_bf16(stage, psi, S);
                CHECK(h.state.total() - seed.total() == 2 * (stage >= 2 ? S : psi));
                MESSAGE("dp " << dp.size() << " stage " << stage << " bf16: " << h.state.total() << " B a rank ("
                              << (double)h.state.total() / (double)psi << " B a parameter), the seed's form "
                              << seed.total() << " B");
            }
            if (stage == 0) dp_activations = h.activations;
            CHECK(h.activations > 0);
            // playbook: 000.04.13 003.2.5 — a micro-batch's saved activations: the same under ZeRO-1/2/3 as under
            //   plain DP
            CHECK(h.activations == dp_activations);
        }
    }
}

}  // namespace

TEST_SUITE("ch03 np2") {
    TEST_CASE("model state a rank holds, fp32 and bf16, DP and ZeRO-1/2/3 = the formula; activations not sharded, dp 2") {
        auto dp = make_world_comm(CommBackend::mpi);
        check_model_state(*dp);
    }
}

TEST_SUITE("ch03 np4") {
    TEST_CASE("model state a rank holds, fp32 and bf16, DP and ZeRO-1/2/3 = the formula; activations not sharded, dp 4") {
        auto dp = make_world_comm(CommBackend::mpi);
        check_model_state(*dp);
    }
}
