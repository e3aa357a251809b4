// test_zero.cpp — chapter 03, ZeRO-1/2/3: each stage trains exactly like one rank on the whole global
// batch (losses and final gathered weights, ARCHITECTURE.md §6), its model-state bytes per rank equal
// formulas.hpp's zero_model_state_bytes_fp32 exactly, and its bytes per step equal zero_step_bytes —
// ZeRO-3 sends exactly 1.5× ZeRO-1's for a tied model (3Ψ vs 2Ψ).
// Playbook: "Zero Redundancy Optimizer (ZeRO)". Run: `make test CH=03`, or by hand
//   mpirun -np 4 build/bin/tests_03 -ts='ch03 np4'
#include "../../02_data_parallel/data_parallel.hpp"
#include "../../03_zero/zero.hpp"
#include "../../common/formulas.hpp"
#include "../01_single_gpu/cores_testing.hpp"
#include "../01_single_gpu/equivalence.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

constexpr uint64_t kSeed = 5;
constexpr int64_t kSeq = 32;

struct Spec {
    bool tied = false;
    int64_t micro_batch = 2, grad_accum = 1, steps = 5;
    Recompute recompute = Recompute::none;  // of the ZeRO run (the reference keeps everything)
};

LlamaConfig model_config(const Spec& s) {  // `tiny` over the byte vocabulary: it reads the addition task
    LlamaConfig c = preset("tiny");
    c.vocab = kByteVocab;
    c.tied_embeddings = s.tied;
    return c;
}

// eps 1e-6, not 1e-8: at init some gradients (q_proj: near-uniform attention) are ~1e-8, where AdamW
// turns their rounding noise (sums in another order) into lr-sized steps; 1e-6 keeps such steps linear
const AdamWConfig kAdamW{1e-3f, 0.9f, 0.95f, 1e-6f, 0.1f};
float lr_at(int64_t step) { return 2e-3f / (float)(step + 1); }  // changes every step, so each one counts

// A ZeRO run: its losses, the weights gathered from the shards after the last step, and what it held and sent
struct ZeroRun : Trained {
    ModelStateBytes state;  // params/grads/master/optim bytes this run holds after a step
    CommCounters traffic;   // the last step's counters
    int64_t comm_peak = 0;  // peak Tag::comm bytes during training
};

// The single-rank reference: the whole global batch of dp · micro_batch · grad_accum rows in one micro-batch.
Trained reference_run(const Spec& s, int dp) {
    Model m(model_config(s), Device::cpu, kSeed);
    auto data = make_dataset("addition", kSeed, kByteVocab);
    return train_reference(m, kAdamW, *data, kSeq, dp * s.micro_batch * s.grad_accum, s.steps, lr_at, 1.0f);
}

int64_t state_bytes_now(Tag tag) { return mem_stats(Device::cpu).current[(int)tag]; }

ZeroRun train_zero(const Spec& s, ZeroStage stage, Comm& dp, const Dataset& data) {
    const Tag state_tags[] = {Tag::params, Tag::grads, Tag::master, Tag::optim};
    int64_t before[4];
    for (int i = 0; i < 4; i++) before[i] = state_bytes_now(state_tags[i]);
    ModelOptions opt;
    opt.recompute = s.recompute;
    Model m(model_config(s), Device::cpu, kSeed, zero_model_options(stage, opt));
    ZeroHooks hooks(m, dp, stage, kAdamW);
    Trainer trainer{m, hooks.optimizer(), {&hooks}};
    TrainConfig cfg;
    cfg.seq = kSeq;
    cfg.micro_batch = s.micro_batch;
    cfg.grad_accum = s.grad_accum;
    BatchPlan plan = data_parallel_plan(cfg, dp);
    mem_reset_peak(Device::cpu);
    const int64_t comm_before = state_bytes_now(Tag::comm);
    ZeroRun t;
    for (int64_t step = 0; step < s.steps; step++) {
        const StepResult r = training_step(trainer, data, step, plan, lr_at(step), 1.0f);
        t.losses.push_back(r.loss);
        t.norms.push_back(r.grad_norm);
    }
    t.comm_peak = mem_stats(Device::cpu).peak[(int)Tag::comm] - comm_before;
    int64_t after[4];
    for (int i = 0; i < 4; i++) after[i] = state_bytes_now(state_tags[i]) - before[i];
    t.state = ModelStateBytes{after[0], after[1], after[2], after[3]};
    t.traffic = hooks.last_step_traffic();
    CHECK(hooks.optimizer().norm_reductions == s.steps);  // the global grad norm: one all-reduce per step
    t.params = hooks.gather_params().to_host();
    return t;
}

std::vector<int64_t> unit_numels(const LlamaConfig& c) {
    std::vector<int64_t> n;
    for (const ParamUnit& u : ParamLayout::build(c).units) n.push_back(u.numel);
    return n;
}

// One stage against the reference: training, memory formula, traffic formula. Returns the ZeRO run.
ZeroRun check_stage(const Spec& s, ZeroStage stage, Comm& dp, const Trained& ref) {
    const LlamaConfig c = model_config(s);
    auto data = make_dataset("addition", kSeed, (int32_t)c.vocab);
    CAPTURE((int)stage);
    CAPTURE(dp.size());
    CAPTURE(s.tied);
    CAPTURE(s.grad_accum);
    ZeroRun z = train_zero(s, stage, dp, *data);
    check_same_training(z, ref, c, 1e-5, "ZeRO");

    const int64_t psi = c.n_params(), S = zero_shard_numel(unit_numels(c), dp.size(), dp.rank());
    const ModelStateBytes want = zero_model_state_bytes_fp32((int)stage, psi, S);
    CHECK(z.state.params == want.params);
    CHECK(z.state.grads == want.grads);
    CHECK(z.state.master == 0);
    CHECK(z.state.optim == want.optim);
    CHECK(z.comm_peak > 0);  // the transient buffers exist, and are not counted as model state

    const double bytes = zero_step_bytes((int)stage, psi, c.vocab * c.hidden, c.tied_embeddings, s.grad_accum,
                                         dp.size());
    CHECK(z.traffic.total_bytes() == doctest::Approx(bytes).epsilon(1e-12));
    CHECK(z.traffic.calls[(int)CommOp::all_reduce] == 0);
    return z;
}

void check_all_stages(Comm& dp, const Spec& s) {
    const Trained ref = reference_run(s, dp.size());
    CHECK(ref.losses.back() < ref.losses.front());  // it trains: a weight-equality check means something
    for (ZeroStage st : {ZeroStage::zero1, ZeroStage::zero2, ZeroStage::zero3}) check_stage(s, st, dp, ref);
}

// ZeRO-3's bytes per step against ZeRO-1's on the same model and batch, A = 1: 3Ψ / 2Ψ for a tied model;
// an untied one saves the embedding's backward gather.
void check_traffic_ratio(Comm& dp) {
    for (bool tied : {true, false}) {
        CAPTURE(tied);
        Spec s{tied, 2, 1, 2};
        const Trained ref = reference_run(s, dp.size());
        const double z1 = check_stage(s, ZeroStage::zero1, dp, ref).traffic.total_bytes();
        const double z3 = check_stage(s, ZeroStage::zero3, dp, ref).traffic.total_bytes();
        const LlamaConfig c = model_config(s);
        const double K = dp.size(), embedding = (K - 1) / K * 4.0 * (double)(c.vocab * c.hidden);
        CHECK(z1 > 0);
        if (tied)
            CHECK(z3 == 1.5 * z1);  // K = 2, 4: (K-1)/K is exact in binary, so every sum is exact too
        else
            CHECK(z3 == 1.5 * z1 - embedding);
    }
}

}  // namespace

TEST_SUITE("ch03 np2") {
    TEST_CASE("ZeRO-1/2/3 train exactly like one rank, untied, dp 2") {
        auto dp = make_world_comm(CommBackend::mpi);
        // playbook: 000.02.6 000.04.2 000.04.3 000.04.7 003.2.1 — each stage trains like one rank; params/grads/optim
        //   bytes by the allocator = zero_model_state_bytes_fp32; bytes a step = zero_step_bytes
        check_all_stages(*dp, Spec{false, 2, 1, 5});
    }

    TEST_CASE("ZeRO-1/2/3 under gradient accumulation, tied embeddings, dp 2") {
        auto dp = make_world_comm(CommBackend::mpi);
        check_all_stages(*dp, Spec{true, 1, 2, 5});
    }

    TEST_CASE("ZeRO-3 sends exactly 1.5x ZeRO-1's bytes (tied); untied, the embedding's backward gather is saved") {
        auto dp = make_world_comm(CommBackend::mpi);
        // playbook: 000.04.1 000.04.7 003.2.2 — ZeRO-3's bytes a step = 1.5 x ZeRO-1's (3Ψ vs 2Ψ), tied
        check_traffic_ratio(*dp);
    }

    TEST_CASE("ZeRO-3 under full recomputation (backward reruns each block on the gathered weights) and under offload") {
        auto dp = make_world_comm(CommBackend::mpi);
        Spec s{true, 2, 1, 3, Recompute::full};
        // playbook: 000.04.9 — ZeRO-3 under full recomputation trains like one rank, bytes = formula
        check_stage(s, ZeroStage::zero3, *dp, reference_run(s, dp->size()));
        s.recompute = Recompute::offload;  // gathered weights, activations parked on the host
        check_stage(s, ZeroStage::zero3, *dp, reference_run(s, dp->size()));
    }

    TEST_CASE("ZeRO-3 gathers each unit once per pass: prefetch adds no bytes") {
        auto dp = make_world_comm(CommBackend::mpi);
        const Spec s{false, 2, 1, 1};
        const LlamaConfig c = model_config(s);
        auto data = make_dataset("addition", kSeed, kByteVocab);
        const CommCounters t = train_zero(s, ZeroStage::zero3, *dp, *data).traffic;
        const int64_t units = c.n_layers + 2;
        // playbook: 000.04.9 000.04.10 — all-gathers a step: every unit forward, every unit but the untied embedding
        //   backward
        CHECK(t.calls[(int)CommOp::all_gather] == units + (units - 1));  // forward all, backward all but the embedding
        CHECK(t.calls[(int)CommOp::reduce_scatter] == units);
    }

    TEST_CASE("ZeRO-3 prefetch: acquire(u, next) starts next's gather, which the next acquire uses; again keeps a unit") {
        auto dp = make_world_comm(CommBackend::mpi);
        const ParamLayout layout = ParamLayout::build(model_config(Spec{}));
        UnitShards shards(layout, dp->size(), dp->rank());
        Tensor shard = Tensor::empty({shards.numel()}, DType::f32, Device::cpu, Tag::params);
        shards.init([](const ParamLayout& l, Tensor& t) { init_params(l, kSeed, t); }, shard);
        GatheredParams gp(shards, *dp, shard);
        Tensor w1 = gp.acquire(1, 2);
        CHECK(gp.gathers() == 2);  // unit 1, and unit 2 already on its way while 1 computes
        gp.release(1, false);
        CHECK(!gp.idle());         // unit 2 is in flight (or arrived)
        Tensor w2 = gp.acquire(2, -1);
        // playbook: 000.04.10 — a released unit is gathered again; `again` keeps one (a tied head)
        CHECK(gp.gathers() == 2);  // the prefetched gather served it: no new one
        gp.release(2, false);
        CHECK(gp.idle());
        gp.acquire(0, -1);
        gp.release(0, true);       // the pass reads it again (a tied head): kept
        CHECK(!gp.idle());
        gp.acquire(0, -1);
        CHECK(gp.gathers() == 3);
        gp.release(0, false);
        CHECK(gp.idle());
        // what was gathered is the unit's initial weights
        Tensor full = Tensor::empty({layout.numel}, DType::f32, Device::cpu, Tag::workspace);
        init_params(layout, kSeed, full);
        check_close(w1.to_host(), shards.unit_of(full, 1).to_host(), 0, 0, "gathered unit 1");
    }

    TEST_CASE("ZeRO-3 follows the model's walk: a pipeline stage's slice, forwards and backwards interleaved (1F1B)") {
        auto dp = make_world_comm(CommBackend::mpi);
        const LlamaConfig c = model_config(Spec{});
        ModelOptions o;
        o.slice = {1, 2, false, true};  // the last stage: layer 1 and the head
        Model ref(c, Device::cpu, kSeed, o);
        Model m(c, Device::cpu, kSeed, zero_model_options(ZeroStage::zero3, o));
        ZeroHooks hooks(m, *dp, ZeroStage::zero3, kAdamW);
        auto data = make_dataset("addition", kSeed, kByteVocab);
        BatchPlan plan;
        plan.seq = kSeq, plan.micro_batch = 2, plan.grad_accum = 2, plan.global_batch = 4;
        std::vector<MicroBatch> mbs = make_micro_batches(*data, 0, plan, Device::cpu);
        std::vector<Tensor> hidden = {random_tensor({2 * kSeq, c.hidden}, 1), random_tensor({2 * kSeq, c.hidden}, 2)};
        ref.zero_grads();
        for (int i = 0; i < 2; i++) {
            MicroBatchActs a = ref.forward(mbs[i], 50.0, hidden[i]);
            ref.backward(a);
        }
        hooks.begin_step();
        const CommCounters before = dp->counters();
        MicroBatchActs a0 = m.forward(mbs[0], 50.0, hidden[0]);  // F0 F1 B0 B1: one stage's 1F1B warm-up
        MicroBatchActs a1 = m.forward(mbs[1], 50.0, hidden[1]);
        m.backward(a0);
        m.backward(a1);
        hooks.finish_gradients();
        const CommCounters t = dp->counters() - before;
        // each of the stage's 2 units gathered once per forward and once per backward: nothing else (the
        // absent layer 0 and embedding never), every prefetch used
        // playbook: 000.04.9 000.10.2 — a pipeline stage's ZeRO-3 gathers only its units' weights, once a pass
        CHECK(t.calls[(int)CommOp::all_gather] == 2 * 2 + 2 * 2);
        const double unit_bytes = (double)(m.layout().units[m.layout().layer_unit(1)].numel +
                                           m.layout().units[m.layout().head_unit()].numel) * 4;
        CHECK(t.bytes[(int)CommOp::all_gather] == doctest::Approx(4 * (dp->size() - 1.0) / dp->size() * unit_bytes));
        CHECK_NOTHROW(hooks.before_update());  // nothing left gathered
        // the gradients: every rank ran the same micro-batches, so its shard holds dp × the reference's
        Tensor want = Tensor::empty({hooks.shards().numel()}, DType::f32, Device::cpu, Tag::workspace);
        hooks.shards().copy_from_full(ref.grads(), want);
        scale_inplace(want, (float)dp->size());
        check_close(hooks.optimizer().grad.to_host(), want.to_host(), 1e-5, 1e-7, "ZeRO-3 stage gradients");
    }

    TEST_CASE("ZeRO rejects a model built without the stage's options, and bad --zero values") {
        auto dp = make_world_comm(CommBackend::mpi);
        Model m(model_config(Spec{}), Device::cpu, kSeed);  // full weights and gradients
        CHECK(contains(error_of([&] { ZeroHooks hooks(m, *dp, ZeroStage::zero3, kAdamW); }), "zero_model_options"));
        CHECK(contains(error_of([] { parse_zero_stage(4); }), "--zero 4"));
        ModelOptions o = zero_model_options(ZeroStage::zero2);
        o.mlp_core = std::make_shared<TwoMlps>();  // a unit per layer sharded over ep: ZeRO would need edp
        Model experts(model_config(Spec{}), Device::cpu, kSeed, o);
        CHECK(contains(error_of([&] { ZeroHooks hooks(experts, *dp, ZeroStage::zero2, kAdamW); }), "expert-parallel"));
    }
}

TEST_SUITE("ch03 np4") {
    TEST_CASE("ZeRO-1/2/3 train exactly like one rank, dp 4, with and without accumulation") {
        auto dp = make_world_comm(CommBackend::mpi);
        // playbook: 000.04.2 000.04.3 000.04.7 003.2.1 — the same at dp 4
        check_all_stages(*dp, Spec{false, 1, 1, 5});
        check_all_stages(*dp, Spec{true, 1, 2, 5});
    }

    TEST_CASE("ZeRO-3 sends exactly 1.5x ZeRO-1's bytes (tied), dp 4") {
        auto dp = make_world_comm(CommBackend::mpi);
        // playbook: 000.04.1 000.04.3 — the same at dp 4
        check_traffic_ratio(*dp);
    }

    TEST_CASE("ZeRO over 3 ranks: units that 3 does not divide give uneven shards, no padding") {
        auto world = make_world_comm(CommBackend::mpi);
        auto dp = world->split(world->rank() < 3 ? 0 : 1, world->rank(), "dp");
        if (world->rank() >= 3) return;  // the fourth rank sits this one out
        const LlamaConfig c = model_config(Spec{});
        std::vector<int64_t> n = unit_numels(c);
        int64_t total = 0;
        for (int r = 0; r < 3; r++) total += zero_shard_numel(n, 3, r);
        CHECK(total == c.n_params());
        CHECK(zero_shard_numel(n, 3, 0) != zero_shard_numel(n, 3, 2));  // the model really is uneven here
        check_all_stages(*dp, Spec{false, 1, 1, 3});
    }
}
