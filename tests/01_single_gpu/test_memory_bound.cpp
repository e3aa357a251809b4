// test_memory_bound.cpp — the memory estimate made before anything is allocated (check_memory_bound,
// common/memory_bound.hpp) is a lower bound of what a rank allocates, and a tight one: equal to the allocator's
// model state at one rank; at or below the largest pipeline stage's (a tensor-parallel shard's: chapter 04's
// test_parallel_layers.cpp); cut by ZeRO's stages and the precision policy's bytes; with --steps 0 no AdamW
// state (and AdamW allocates none).
// A layout that fits is not refused, one that does not is, naming the bytes of each kind.
// Playbook: "First steps: training on one GPU" (memory usage), "Pipeline parallelism", "ZeRO".
//   build/bin/tests_01 -ts='ch01 np1' -tc='memory bound*'
#include "../../common/train_loop.hpp"
#include "../testing.hpp"

using namespace penta;
using penta::testing::contains;
using penta::testing::error_of;

namespace {

constexpr double GiB = 1073741824.0;

// What a model of this layout (one rank of it) and its AdamW allocate as model state, by the allocator's tags
MemoryBound allocated(const LlamaConfig& c, const ModelOptions& o, const AdamWConfig& ac) {
    const MemStats before = mem_stats(Device::cpu);
    Model m(c, Device::cpu, 1, o);
    std::unique_ptr<AdamW> optim = make_adamw(m, ac);
    const MemStats& now = mem_stats(Device::cpu);
    auto grew = [&](Tag t) { return (double)(now.current[(int)t] - before.current[(int)t]); };
    MemoryBound b;
    b.weights = grew(Tag::params), b.grads = grew(Tag::grads), b.optim = grew(Tag::optim) + grew(Tag::master);
    return b;
}

TrainConfig run_of(const std::string& precision, int64_t steps) {
    TrainConfig cfg;
    cfg.precision = precision, cfg.steps = steps, cfg.device = "cpu";
    return cfg;
}

}  // namespace

TEST_SUITE("ch01 np1") {

TEST_CASE("memory bound: at one rank it is the allocator's model state exactly, in every precision, with and without "
          "AdamW's state (--steps 0 allocates none)") {
    const LlamaConfig c = preset("small");
    for (const char* precision : {"fp32", "bf16"})
        for (int64_t steps : {10, 0}) {
            CAPTURE(precision);
            CAPTURE(steps);
            const TrainConfig cfg = run_of(precision, steps);
            ModelOptions o;
            o.precision = Precision::named(precision);
            const MemoryBound got = allocated(c, o, adamw_config(cfg));
            const MemoryBound want = memory_lower_bound(cfg, c, Device::cpu, 0);
            CHECK(want.weights == got.weights);
            CHECK(want.grads == got.grads);
            CHECK(want.optim == got.optim);
            // fp32: 4 + 4 + 8 bytes a parameter; bf16: 2 + 4 + (4 master + 8); no AdamW state without steps
            const double N = (double)c.n_params(), bf16 = std::string(precision) == "bf16";
            CHECK(got.weights == N * (bf16 ? 2 : 4));
            CHECK(got.optim == (steps == 0 ? 0.0 : N * (bf16 ? 12 : 8)));
        }
}

TEST_CASE("memory bound: no pipeline stage allocates less than the bound of its layout") {
    LlamaConfig c = preset("small");
    c.n_layers = 5;  // an uneven split: 3 + 2
    for (bool tied : {true, false}) {
        c.tied_embeddings = tied;
        TrainConfig cfg = run_of("fp32", 10);
        cfg.pp = 2;
        double largest = 0;
        for (PipelineSlice s : {PipelineSlice{0, 3, true, false}, PipelineSlice{3, -1, false, true}}) {
            ModelOptions o;
            o.slice = s;
            const MemoryBound a = allocated(c, o, adamw_config(cfg));
            largest = std::max(largest, a.weights + a.grads + a.optim);
        }
        const MemoryBound b = memory_lower_bound(cfg, c, Device::cpu, 0);
        CAPTURE(tied);
        CHECK(b.weights + b.grads + b.optim <= largest);
        CHECK(b.weights + b.grads + b.optim >= 0.9 * largest);  // and a tight one (3 of 5 layers: 0.97)
    }
}

TEST_CASE("memory bound: ZeRO's stages, --pp and --steps 0 each cut it; a layout that fits is not refused, one that "
          "does not is, naming the bytes") {
    const LlamaConfig c = preset("llama3.2-1b");  // 1.24G parameters, tied
    const double N = (double)c.n_params();
    TrainConfig cfg = run_of("fp32", 100);
    cfg.dp = 4;
    const MemoryBound z0 = memory_lower_bound(cfg, c, Device::cuda, 0), z1 = memory_lower_bound(cfg, c, Device::cuda, 1),
                      z2 = memory_lower_bound(cfg, c, Device::cuda, 2), z3 = memory_lower_bound(cfg, c, Device::cuda, 3);
    CHECK(z0.weights == 4 * N);
    CHECK(z0.optim == 8 * N);
    CHECK((z1.optim == 2 * N && z1.grads == 4 * N));
    CHECK((z2.grads == N && z2.weights == 4 * N));
    CHECK(z3.weights == N);
    CHECK(memory_lower_bound(cfg, c, Device::cuda).weights == N);  // a chapter that does not say: as deep as allowed
    cfg.dp = 1;

    // the figures: a 20-layer model at --pp 2 holds about half of it on each stage
    LlamaConfig deep = c;
    deep.n_layers = 20;
    cfg.micro_batch = 1;
    const double whole = memory_lower_bound(cfg, deep, Device::cuda).total();
    cfg.pp = 2;
    const double half = memory_lower_bound(cfg, deep, Device::cuda).total();
    CHECK(half <= 0.6 * whole);  // 10 layers + the embedding (first stage) or its replica for lm_head (last)
    CHECK(half > 0.45 * whole);
    const double between = (half + whole) / 2;
    CHECK(error_of([&] { check_memory_bound(cfg, deep, Device::cuda, kZeroUnknown, between); }) == "");
    cfg.pp = 1;
    const std::string refused = error_of([&] { check_memory_bound(cfg, deep, Device::cuda, kZeroUnknown, between); });
    CHECK(contains(refused, "one rank needs at least " + human_bytes((int64_t)whole)));
    CHECK(contains(refused, "more than the " + human_bytes((int64_t)between) + " of GPU memory it has"));
    CHECK(contains(refused, "a smaller --model, or cut it over more ranks"));

    // generation or export only (--steps 0): Llama-3.2-1B's weights and gradients fit a 16 GiB GPU, training
    // with AdamW (16 bytes a parameter) does not
    cfg.steps = 0;
    const MemoryBound gen = memory_lower_bound(cfg, c, Device::cuda);
    CHECK((gen.weights == 4 * N && gen.grads == 4 * N && gen.optim == 0 && gen.acts == 0));
    CHECK(error_of([&] { check_memory_bound(cfg, c, Device::cuda, kZeroUnknown, 16 * GiB); }) == "");
    cfg.steps = 1;
    const std::string train = error_of([&] { check_memory_bound(cfg, c, Device::cuda, kZeroUnknown, 16 * GiB); });
    CHECK(contains(train, "weights " + human_bytes((int64_t)(4 * N)) + ", gradients " + human_bytes((int64_t)(4 * N)) +
                              ", AdamW " + human_bytes((int64_t)(8 * N))));
    CHECK(contains(train, "more than the 16.00GiB of GPU memory it has"));
    cfg.precision = "bf16";  // 2 + 4 + 12 bytes a parameter: bf16 weights do not make the state smaller
    CHECK(memory_lower_bound(cfg, c, Device::cuda).weights + memory_lower_bound(cfg, c, Device::cuda).grads +
              memory_lower_bound(cfg, c, Device::cuda).optim == 18 * N);
}

}  // TEST_SUITE
