// test_schedule.cpp — the training step's seams (training_step.hpp, schedule.hpp): a list of hooks runs
// phase by phase whatever its order; the Sequential schedule tells the hooks which backward is the last; a
// sharder picks the tokens (and their positions) a rank holds, and the token count follows; a step's loss and
// grad norm do not depend on how the global batch is cut into micro-batches.
// Playbook: "First steps: training on one GPU" (gradient accumulation),
// "Context parallelism" (which tokens a rank holds). Run: `make test CH=01`.
#include "../../common/training_step.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

// Logs every phase it sees, under its name.
struct LoggingHooks : StepHooks {
    LoggingHooks(std::string name, std::vector<std::string>& log) : name(std::move(name)), log(log) {}
    void begin_step() override { log.push_back(name + " begin"); }
    void before_gradients(int64_t i, bool last) override { log.push_back(strfmt("%s gradients %ld%s", name.c_str(), (long)i, last ? " last" : "")); }
    void finish_gradients() override { log.push_back(name + " finish"); }
    void before_update() override { log.push_back(name + " before update"); }
    void after_update() override { log.push_back(name + " after update"); }
    std::string name;
    std::vector<std::string>& log;
};

// the positions of the last half of each sequence: what a context-parallel rank might hold
struct SecondHalf : SequenceSharder {
    std::vector<int32_t> positions(int64_t T) const override {
        std::vector<int32_t> p;
        for (int64_t t = T / 2; t < T; t++) p.push_back((int32_t)t);
        return p;
    }
};

LlamaConfig tiny_bytes() {
    LlamaConfig c = preset("tiny");
    c.vocab = kByteVocab;
    return c;
}

}  // namespace

TEST_SUITE("ch01 np1") {

TEST_CASE("training step: a list of hooks runs phase by phase, each phase on every hook before the next") {
    const LlamaConfig cfg = tiny_bytes();
    auto data = make_dataset("addition", 3, (int32_t)cfg.vocab);
    Model m(cfg, Device::cpu, 3);
    std::unique_ptr<AdamW> opt = make_adamw(m, AdamWConfig{});
    std::vector<std::string> log;
    LoggingHooks a("A", log), b("B", log);
    Trainer t{m, *opt, {&a, &b}};
    BatchPlan plan;
    plan.seq = 32, plan.micro_batch = 2, plan.grad_accum = 2, plan.global_batch = 4;
    training_step(t, *data, 0, plan, 1e-3f, 1.0f);
    const std::vector<std::string> want = {"A begin",         "B begin",         "A gradients 0",    "B gradients 0",
                                           "A gradients 1 last", "B gradients 1 last", "A finish",      "B finish",
                                           "A before update", "B before update", "A after update", "B after update"};
    CHECK(log == want);
}

TEST_CASE("training step: gradient accumulation does not change loss or grad norm") {
    const LlamaConfig cfg = tiny_bytes();
    auto data = make_dataset("addition", 3, (int32_t)cfg.vocab);
    StepResult one, four;
    for (int64_t ga : {1, 4}) {
        Model m(cfg, Device::cpu, 3);
        std::unique_ptr<AdamW> opt = make_adamw(m, AdamWConfig{});
        Trainer t{m, *opt};
        BatchPlan plan;
        plan.seq = 32, plan.micro_batch = 8 / ga, plan.grad_accum = ga, plan.global_batch = 8;
        (ga == 1 ? one : four) = training_step(t, *data, 0, plan, 1e-3f, 1.0f);
    }
    CHECK(four.global_tokens == one.global_tokens);
    CHECK(std::abs(four.loss - one.loss) <= 1e-6 * one.loss);
    // playbook: 000.02.1 — gradient accumulation: 4 micro-batches give one batch's loss and grad norm
    CHECK(std::abs(four.grad_norm - one.grad_norm) <= 1e-5 * one.grad_norm);
}

TEST_CASE("micro-batches: a sharder picks the held tokens, their targets and positions; the token count follows") {
    const LlamaConfig cfg = tiny_bytes();
    auto data = make_dataset("addition", 3, (int32_t)cfg.vocab);
    BatchPlan plan;
    plan.seq = 16, plan.micro_batch = 2, plan.grad_accum = 2, plan.global_batch = 8, plan.first_row = 4;
    int64_t whole_targets = 0, half_targets = 0;
    std::vector<MicroBatch> whole = make_micro_batches(*data, 1, plan, Device::cpu, &whole_targets);
    plan.sharder = std::make_shared<SecondHalf>();
    std::vector<MicroBatch> half = make_micro_batches(*data, 1, plan, Device::cpu, &half_targets);
    REQUIRE(whole.size() == 2);
    REQUIRE(half.size() == 2);
    Batch rows = load_batch(*data, global_sample_id(1, 4, 8), 4, 16);  // what this rank reads of step 1
    CHECK(whole_targets == count_targets(rows));
    int64_t second_half_targets = 0;
    for (int64_t r = 0; r < 4; r++)
        for (int64_t t = 8; t < 16; t++) second_half_targets += rows.targets[r * 16 + t] != kIgnoreTarget;
    CHECK(half_targets == second_half_targets);
    for (int a = 0; a < 2; a++) {
        CHECK(half[a].index == a);
        // playbook: 000.B.1 — a micro-batch holds seq x mbs tokens
        CHECK(half[a].T == 8);
        CHECK(half[a].positions.to_host_i32() == std::vector<int32_t>{8, 9, 10, 11, 12, 13, 14, 15});
        const std::vector<int32_t> tok = half[a].tokens.to_host_i32(), tg = half[a].targets.to_host_i32();
        for (int64_t b = 0; b < 2; b++)
            for (int64_t t = 0; t < 8; t++) {
                CHECK(tok[b * 8 + t] == rows.tokens[(a * 2 + b) * 16 + 8 + t]);
                CHECK(tg[b * 8 + t] == rows.targets[(a * 2 + b) * 16 + 8 + t]);
            }
        CHECK(whole[a].positions.to_host_i32().size() == 16);
    }
}

}  // TEST_SUITE
