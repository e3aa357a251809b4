// test_training.cpp — the four precision policies train: `small` under fp32, bf16, fp16 and fp8 from the same
// weights on the same text, each one's loss over its last steps within 5% of fp32's, each holding the model
// state bytes per parameter its policy says; and bf16 through chapter 04's layouts (dp 2 × tp 2, the policy
// flowing through the all-reduces and the vocab-parallel loss) training like one bf16 rank.
// 300 steps of all four take ~10 minutes on this 2-core machine (chapter 11's README has them); the test runs
// 40 steps.
// Playbook: "Mixed precision training". Run: `make test CH=11`, or
//   build/bin/tests_11 -tc='*four policies*'
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bin/tests_11 -ts='ch11 np4'
#include <cmath>

#include "../../11_mixed_precision/mixed_precision.hpp"
#include "../01_single_gpu/equivalence.hpp"
#include "../01_single_gpu/words_dataset.hpp"
#include "../04_tensor_parallel/tp_testing.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::tp_testing;

TEST_SUITE("ch11 np1") {

TEST_CASE("precision: the four policies train small for 40 steps within 5% of fp32's loss, with their bytes per parameter") {
    TrainConfig cfg;
    cfg.model = "small", cfg.seq = 32, cfg.micro_batch = 16, cfg.lr = 2e-3f, cfg.warmup = 10, cfg.steps = 40;
    const LlamaConfig mc = preset("small");
    auto data = words_dataset((int32_t)mc.vocab);
    std::vector<SchemeRun> runs;
    for (const char* p : {"fp32", "bf16", "fp16", "fp8"}) runs.push_back(train_scheme(cfg, mc, *data, p, false));
    MESSAGE("\n" << loss_curves(runs, 40, 10));
    const double fp32 = final_loss(runs[0], 10);
    CHECK(fp32 < 0.6 * runs[0].losses.front());  // it learns, so agreeing means something
    const int64_t N = mc.n_params();
    for (const SchemeRun& r : runs) {
        INFO(r.precision << ": mean loss of the last 10 steps " << final_loss(r, 10) << ", fp32 " << fp32);
        CHECK(std::abs(final_loss(r, 10) - fp32) <= 0.05 * fp32);
        CHECK(r.n_params == N);
        // playbook: 000.02.6 000.12.8 000.12.9b 000.12.10 003.6.3 — every policy's bytes a parameter by the
        //   allocator: f32 gradients 4, Adam 8, weights 4 or 2, master 0 or 4
        CHECK(r.state.grads == 4 * N);  // f32 gradient accumulation in every policy
        CHECK(r.state.optim == 8 * N);
        CHECK(r.state.params == (r.precision == "fp32" ? 4 : 2) * N);
        CHECK(r.state.master == (r.precision == "fp32" ? 0 : 4) * N);
        if (r.precision != "fp32") CHECK(r.losses != runs[0].losses);  // the low precision really ran
    }
    CHECK(runs[2].skipped == 0);  // fp16 at 2^16: small's gradients fit
    CHECK(contains(error_of([] { Precision::named("fp4"); }), "--precision fp4: it must be fp32, bf16, fp16 or fp8"));
    CHECK(Precision::named("fp32").str() == Precision{}.str());  // the default is fp32, bit for bit
}

}  // TEST_SUITE

TEST_SUITE("ch11 np4") {

TEST_CASE("precision: bf16 under dp 2 × tp 2 trains like one bf16 rank, to bf16's reordering spread") {
    LlamaConfig cfg = tp_config(63);
    Layout L;
    L.tp = 2, L.dp = 2, L.micro_batch = 2, L.grad_accum = 2;
    L.precision = Precision::named("bf16");
    const std::string what = L.str();
    INFO(what);
    const Run run = run_layout(cfg, L, 6);
    // one bf16 rank on the same global batch; its own reordered twin (train_reference) measures how far
    // summing in another order moves a bf16 run: a last-bit difference in f32 flips a bf16 rounding of a GEMM
    // input now and then, 2^-9 of that element, so bf16's spread is wider than fp32's and the weights are held
    // to it (check_same_training: kWeightSpread times it per tensor)
    const Trained ref = train_one_rank(cfg, L.seq, L.dp * L.micro_batch * L.grad_accum, L.recompute, 6, L.precision);
    check_same_training(run, ref, cfg, 2e-3, what);
    // playbook: 003.6.2 — bf16 trains (no loss scaling) with an fp32 master on every rank
    CHECK(run.state.params == run.state.master / 2);  // bf16 weights beside their fp32 master, on every rank
    CHECK(run.state.master > 0);
}

}  // TEST_SUITE
