// test_dp.cpp — chapter 02, data parallelism: the equivalence test of ARCHITECTURE.md §6 (dp ranks train exactly
// like one rank on the whole global batch), naive vs bucketed, no_sync on vs off, bytes per step equal to
// the ring formula 2(K-1)/K · M, and the bucket plan.
// Playbook: "Data parallelism". Run: `make test CH=02`, or by hand
//   mpirun -np 4 build/bin/tests_02 -ts='ch02 np4' -tc='*data parallel*'
#include "../../02_data_parallel/data_parallel.hpp"
#include "../../common/runtime.hpp"
#include "../01_single_gpu/cores_testing.hpp"
#include "../01_single_gpu/equivalence.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

constexpr int64_t kSteps = 5, kSeq = 32, kMicroBatch = 2;
constexpr uint64_t kSeed = 21;

// `tiny` with the byte vocabulary, so it trains on the addition task (few targets per sequence: the
// global token count matters)
LlamaConfig tiny_bytes(bool tied) {
    LlamaConfig c = preset("tiny");
    c.vocab = kByteVocab;
    c.tied_embeddings = tied;
    return c;
}

// A Comm whose all_reduce_async reduces the buffer at the moment it is called, the way NCCL on its
// stream reads it as soon as the compute before it is done. MPI's non-blocking all-reduce may read the
// buffer later, during test() or wait(), which would hide a bucket sent before its gradients were final;
// through this Comm such a bucket carries partial sums and the equivalence check fails.
class EagerComm : public Comm {
   public:
    explicit EagerComm(Comm& inner) : inner_(inner) {
        rank_ = inner.rank();
        size_ = inner.size();
        name_ = "eager " + inner.name();
    }
    CommBackend backend() const override { return inner_.backend(); }
    CommHandle all_reduce_async(Tensor& x, ReduceOp op) override {
        inner_.all_reduce(x, op);
        record(CommOp::all_reduce, (double)x.nbytes());
        return {};
    }
    CommHandle reduce_scatter_async(const Tensor&, Tensor&) override { return unused(); }
    CommHandle all_gather_async(const Tensor&, Tensor&) override { return unused(); }
    CommHandle broadcast_async(Tensor&, int) override { return unused(); }
    CommHandle send_async(const Tensor&, int, int) override { return unused(); }
    CommHandle recv_async(Tensor&, int, int) override { return unused(); }
    CommHandle all_to_all_v_async(const Tensor&, const std::vector<int64_t>&, const std::vector<int64_t>&, Tensor&,
                                  const std::vector<int64_t>&, const std::vector<int64_t>&) override {
        return unused();
    }
    void barrier() override { inner_.barrier(); }
    double reduce_scalar(double x, ReduceOp op) override { return inner_.all_reduce_scalar(x, op); }
    std::unique_ptr<Comm> split(int, int, const std::string&) override {
        unused();
        return nullptr;
    }

   private:
    CommHandle unused() {
        REQUIRE_MESSAGE(false, "data parallelism uses all_reduce only");
        return {};
    }
    Comm& inner_;
};

struct Run : Trained {
    std::vector<DpStepStats> stats;  // one per step
    std::vector<GradBucket> buckets;
};

const AdamWConfig kAdamW{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};

float lr_at(int64_t s) { return 2e-3f * (float)(s + 1) / kSteps; }  // varying, so every step counts

// One rank, one micro-batch holding the whole global batch of `global` sequences.
Trained reference_run(const LlamaConfig& c, const Dataset& data, int64_t global) {
    Model m(c, Device::cpu, kSeed);
    return train_reference(m, kAdamW, data, kSeq, global, kSteps, lr_at, 1.0f);
}

// A zero-bubble-like order on one stage: every forward, every input gradient (B), then each micro-batch's
// weight gradients (W) in turn, the hooks told before each W: the data-parallel buckets must still carry
// each micro-batch's finished gradients.
struct DeferredWeightGradients : Schedule {
    const char* name() const override { return "F... B... W..."; }
    ScheduleResult run(Model& model, std::vector<MicroBatch>& mbs, double global_tokens, StepHooks& hooks) override {
        ScheduleResult r;
        std::vector<MicroBatchActs> acts;
        for (const MicroBatch& mb : mbs) {
            acts.push_back(model.forward(mb, global_tokens));
            r.loss += acts.back().loss;
        }
        for (MicroBatchActs& a : acts) model.backward_input(a);
        for (size_t i = 0; i < acts.size(); i++) {
            hooks.before_gradients((int64_t)i, i + 1 == acts.size());
            model.backward_weight(acts[i]);
        }
        return r;
    }
};

Run dp_run(const LlamaConfig& c, const Dataset& data, Comm& dp, int64_t grad_accum, DataParallelOptions opt,
           Schedule* schedule = nullptr) {
    Model m(c, Device::cpu, kSeed);
    // as make_adamw does for a grid of dp ranks: dp rank 0 counts the (identical) gradients in the global
    // norm, one all-reduce over the group sums the counts
    AdamW optim(m.params(), m.grads(), optimizer_ranges(m.layout(), GridCoords{dp.rank()}), kAdamW, false, &dp);
    DataParallelHooks hooks(m, dp, opt);
    Trainer trainer{m, optim, {&hooks}, schedule};
    TrainConfig cfg;
    cfg.seq = kSeq;
    cfg.micro_batch = kMicroBatch;
    cfg.grad_accum = grad_accum;
    BatchPlan plan = data_parallel_plan(cfg, dp);
    Run r;
    for (int64_t s = 0; s < kSteps; s++) {
        StepResult x = training_step(trainer, data, s, plan, lr_at(s), 1.0f);
        r.losses.push_back(x.loss);
        r.norms.push_back(x.grad_norm);
        r.stats.push_back(hooks.last_step());
    }
    r.params = m.params().to_host();
    r.buckets = hooks.buckets();
    CHECK(optim.norm_reductions == kSteps);  // the global grad norm: one all-reduce per step
    return r;
}

// Every configuration the chapter offers, on the world's ranks, against the one-rank reference.
void check_equivalence(int expected_ranks) {
    auto world = make_world_comm(CommBackend::mpi);
    REQUIRE(world->size() == expected_ranks);
    const int K = world->size();
    const LlamaConfig c = tiny_bytes(false);
    auto data = make_dataset("addition", kSeed, (int32_t)c.vocab);
    const double M = 4.0 * c.n_params();  // f32 gradient bytes
    for (int64_t ga : {1, 3}) {
        const Trained ref = reference_run(c, *data, K * kMicroBatch * ga);
        for (DpMode mode : {DpMode::naive, DpMode::bucketed}) {
            for (bool no_sync : {true, false}) {
                if (ga == 1 && !no_sync) continue;  // one micro-batch: no_sync changes nothing
                // 40 KiB buckets: tiny's units (33-37 KiB each) pair up into 2 buckets of 2 units
                DataParallelOptions opt{mode, 40.0 / 1024, no_sync};
                const std::string what = strfmt("dp %d, %s, grad-accum %ld, no_sync %d", K, dp_mode_name(mode), (long)ga, (int)no_sync);
                const Run got = dp_run(c, *data, *world, ga, opt);
                check_same_training(got, ref, c, 1e-5, what);
                EagerComm eager(*world);
                if (mode == DpMode::bucketed)
                    check_same_training(dp_run(c, *data, eager, ga, opt), ref, c, 1e-5, what + ", eager comm");
                CAPTURE(what);
                const int64_t reductions = no_sync ? 1 : ga;  // all-reduces of the whole gradient per step
                const size_t nb = got.buckets.size();
                if (mode == DpMode::bucketed) CHECK((nb >= 2 && got.buckets[0].units >= 2));
                else CHECK(nb == 1);
                for (const DpStepStats& st : got.stats) {
                    CHECK(st.bytes == reductions * dp_bytes_per_step_formula(K, M));  // exact: sums of whole bytes
                    CHECK(st.all_reduces == (int64_t)nb * reductions);
                    CHECK(st.reduced_bytes == reductions * M);
                    // bucketed: every bucket leaves while backward still runs; naive: none does
                    CHECK(st.started_in_backward == (mode == DpMode::bucketed ? st.all_reduces : 0));
                }
            }
        }
    }
}

}  // namespace

TEST_SUITE("ch02 np2") {

TEST_CASE("data parallel on 2 ranks trains like one rank: naive/bucketed x grad-accum 1/3 x no_sync on/off") {
    // playbook: 000.02.16 000.03.1 000.03.4 003.1.1 — dp 2 trains like one rank; bytes per step = reductions x
    //   2(K-1)/K·M, one reduction a step with no_sync
    check_equivalence(2);
}

TEST_CASE("data parallel with tied embeddings: the embedding's bucket waits for the embedding backward") {
    auto world = make_world_comm(CommBackend::mpi);
    const LlamaConfig c = tiny_bytes(true);
    auto data = make_dataset("addition", kSeed, (int32_t)c.vocab);
    const Trained ref = reference_run(c, *data, world->size() * kMicroBatch * 3);
    // bucket_mb 0: one bucket per unit, so the head's bucket leaves before the embedding backward adds to
    // the tied matrix, and the embedding's must not leave before it (the eager comm reads it at once)
    EagerComm eager(*world);
    const Run got = dp_run(c, *data, eager, 3, DataParallelOptions{DpMode::bucketed, 0, true});
    REQUIRE(got.buckets.size() == (size_t)c.n_layers + 2);
    CHECK(got.buckets.front().first_unit == (int)c.n_layers + 1);  // the head finishes first
    // playbook: 000.03.2 — the embedding's bucket (tied) is reduced last, after the embedding backward
    CHECK(got.buckets.back().first_unit == 0);                      // the embedding last
    check_same_training(got, ref, c, 1e-5, "tied, one bucket per unit");
}

TEST_CASE("data parallel under a schedule that defers the weight gradients (F... B... W...) trains like one rank") {
    auto world = make_world_comm(CommBackend::mpi);
    const LlamaConfig c = tiny_bytes(true);
    auto data = make_dataset("addition", kSeed, (int32_t)c.vocab);
    const Trained ref = reference_run(c, *data, world->size() * kMicroBatch * 2);
    DeferredWeightGradients deferred;
    for (bool no_sync : {true, false})
        for (DpMode mode : {DpMode::naive, DpMode::bucketed}) {
            const DataParallelOptions opt{mode, 0, no_sync};  // bucketed: one bucket per unit
            check_same_training(dp_run(c, *data, *world, 2, opt, &deferred), ref, c, 1e-5,
                                strfmt("deferred W, %s, no_sync %d", dp_mode_name(mode), (int)no_sync));
        }
}

TEST_CASE("data parallelism refuses a unit it cannot reduce: an expert-parallel one (its group is edp)") {
    auto world = make_world_comm(CommBackend::mpi);
    ModelOptions o;
    o.mlp_core = std::make_shared<TwoMlps>();  // a unit per layer sharded over ep
    Model m(tiny_bytes(false), Device::cpu, kSeed, o);
    CHECK(contains(error_of([&] { DataParallelHooks hooks(m, *world); }), "is expert-parallel (sharded over ep)"));
}

TEST_CASE("data parallel plan: each rank reads its own rows of the global batch; sums run over the group") {
    auto world = make_world_comm(CommBackend::mpi);
    TrainConfig cfg;
    cfg.micro_batch = 3;
    cfg.grad_accum = 2;
    BatchPlan p = data_parallel_plan(cfg, *world);
    // playbook: 000.02.1 000.11.3 003.4.4 003.1.1 — global batch = dp x grad_acc x micro-batch; sums (the loss's
    //   denominator) run over the group
    CHECK(p.global_batch == 6 * world->size());
    CHECK(p.first_row == 6 * world->rank());
    CHECK(p.batch_group == world.get());
    CHECK(p.sum_over_batch(world->rank() + 1.0) == world->size() * (world->size() + 1) / 2.0);
    CHECK(parse_dp_mode("naive") == DpMode::naive);
    CHECK(contains(error_of([] { parse_dp_mode("ring"); }), "--dp-mode ring must be naive or bucketed"));
}

TEST_CASE("data parallel buckets: backward order, contiguous, whole units, about bucket_mb each") {
    const LlamaConfig c = preset("small");
    ParamLayout layout = ParamLayout::build(c);
    for (double mb : {0.0, 1.0, 2.0, 25.0}) {
        CAPTURE(mb);
        std::vector<GradBucket> b = plan_buckets(layout, mb);
        int64_t end = layout.numel;  // buckets go downwards from the end of the buffer
        int next_unit = layout.head_unit();
        for (size_t i = 0; i < b.size(); i++) {
            CHECK(b[i].last_unit == next_unit);
            // playbook: 000.03.3 — buckets in backward order, contiguous, whole units, about bucket_mb each
            CHECK(b[i].offset + b[i].numel == end);
            CHECK(b[i].units == b[i].last_unit - b[i].first_unit + 1);
            // closed as soon as it reaches the cap: without its first (lowest) unit it was below it
            const int64_t without_first = b[i].numel - layout.units[b[i].first_unit].numel;
            if (b[i].units > 1) CHECK(without_first * 4.0 < mb * 1024 * 1024);
            if (i + 1 < b.size()) CHECK(b[i].numel * 4.0 >= mb * 1024 * 1024);
            end = b[i].offset;
            next_unit = b[i].first_unit - 1;
        }
        CHECK(end == 0);
        CHECK(next_unit == -1);
    }
    CHECK(plan_buckets(layout, 0).size() == layout.units.size());
    CHECK(plan_buckets(layout, 1e9).size() == 1);
}

}  // TEST_SUITE

TEST_SUITE("ch02 np4") {

TEST_CASE("data parallel on 4 ranks trains like one rank: naive/bucketed x grad-accum 1/3 x no_sync on/off") {
    // playbook: 000.03.4 — the same on 4 ranks
    check_equivalence(4);
}

}  // TEST_SUITE
