// test_zero3_overlap.cpp — chapter 03: ZeRO-3's prefetch hides the all-gathers behind compute. Asserted
// with no clock and no timing, on a schedule the test controls:
//
//   a logical clock advances by 1 each time the model finishes computing one unit (a ModelObserver sees it);
//   each all-gather takes kGather ticks on the link, one gather after another, starting when it is issued;
//   waiting on a gather that has not finished by the clock's time is EXPOSED: the clock jumps to its end.
//
// With prefetch, acquire(u, next) issues next's gather before u computes, so it finishes while u computes
// (kGather <= 1 unit of compute) and only the first unit of each pass waits: exposed = kGather per pass.
// Without prefetch, or with a prefetch that waits for its gather at once, every acquire waits: exposed =
// kGather per unit. The counts are exact, so the test says how much of the wait prefetch removed.
// The second case turns prefetch off (a provider that tells GatheredParams nothing about the next unit) and
// measures both ways, over the forward and over the backward: the exposed waits on the clock, and the peak of the
// allocator's tags — with prefetch the resident shard + the unit computing + the one being fetched (seed 003:
// "ZeRO-3 的峰值还要加上当前分片单元和预取单元的完整参数"), without it the shard + one unit. Its gradients go to
// one full buffer outside Tag::comm, so that tag holds the gathered weights only, in the backward too.
// The third does the same for ZeRO-1's all-gather of the updated weights, waited for at once after the step
// (ZeroHooks) or left in flight into the next forward (zero1_overlap.hpp, seed 000's suggestion).
// Playbook: "ZeRO-3: adding parameter partitioning" (prefetching the next layer's parameters).
// Run: `make test CH=03`, or mpirun -np 2 build/bin/tests_03 -ts='ch03 np2' -tc='*overlap*'
#include "../../02_data_parallel/data_parallel.hpp"
#include "../../03_zero/zero.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

constexpr double kGather = 1.0;  // ticks per all-gather: as long as one unit's compute

// The logical clock: one tick per unit of compute; the gathers' exposed waits.
struct Clock : ModelObserver {
    double now = 0, link_free = 0, exposed = 0;
    int on_time = 0, late = 0;  // waits on gathers already complete / still running
    void unit_end(int, Pass) override { now += 1; }
};

// A Comm that forwards everything to `inner` and gives each all-gather a finish time on the clock.
class ClockedComm : public Comm {
   public:
    ClockedComm(Comm& inner, Clock& clock) : inner_(inner), clock_(clock) {
        rank_ = inner.rank();
        size_ = inner.size();
        name_ = inner.name();
    }
    CommBackend backend() const override { return inner_.backend(); }
    CommHandle all_gather_async(const Tensor& in, Tensor& out) override {
        const double start = std::max(clock_.now, clock_.link_free);
        clock_.link_free = start + kGather;
        return CommHandle(std::make_unique<Timed>(inner_.all_gather_async(in, out), start + kGather, clock_));
    }
    CommHandle all_reduce_async(Tensor& x, ReduceOp op) override { return inner_.all_reduce_async(x, op); }
    CommHandle reduce_scatter_async(const Tensor& in, Tensor& out) override { return inner_.reduce_scatter_async(in, out); }
    CommHandle broadcast_async(Tensor& x, int root) override { return inner_.broadcast_async(x, root); }
    CommHandle send_async(const Tensor& x, int peer, int tag) override { return inner_.send_async(x, peer, tag); }
    CommHandle recv_async(Tensor& x, int peer, int tag) override { return inner_.recv_async(x, peer, tag); }
    CommHandle all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& sc, const std::vector<int64_t>& so,
                                  Tensor& out, const std::vector<int64_t>& rc, const std::vector<int64_t>& ro) override {
        return inner_.all_to_all_v_async(in, sc, so, out, rc, ro);
    }
    void barrier() override { inner_.barrier(); }
    double reduce_scalar(double x, ReduceOp op) override { return inner_.all_reduce_scalar(x, op); }
    std::unique_ptr<Comm> split(int color, int key, const std::string& name) override {
        return inner_.split(color, key, name);
    }

   private:
    struct Timed : CommHandle::Pending {
        Timed(CommHandle h, double end, Clock& c) : h_(std::move(h)), end_(end), c_(c) {}
        void wait() override {
            h_.wait();
            if (end_ <= c_.now) {
                c_.on_time++;
            } else {
                c_.late++;
                c_.exposed += end_ - c_.now;
                c_.now = end_;
            }
        }
        bool test() override { return c_.now >= end_ && h_.test(); }
        CommHandle h_;
        double end_;
        Clock& c_;
    };
    Comm& inner_;
    Clock& clock_;
};

// `tiny` with the byte vocabulary and 4 layers: 6 units (embedding, 4 layers, head)
LlamaConfig six_units() {
    LlamaConfig c = preset("tiny");
    c.vocab = kByteVocab;
    c.n_layers = 4;
    return c;
}

// A gradient sink over one full buffer (Tag::grads): backward's gradients stay out of Tag::comm
struct FullGrads : GradientSink {
    FullGrads(const UnitShards& s, int64_t n) : shards(s), all(Tensor::zeros({n}, DType::f32, Device::cpu, Tag::grads)) {}
    Tensor grads(int unit) override { return shards.unit_of(all, unit); }
    void layer_grads_ready(int) override {}
    const UnitShards& shards;
    Tensor all;  // (n_params)
};

// The model's walk with prefetch off: the same provider, told nothing about the unit that comes next
struct NoPrefetch : ParamProvider {
    explicit NoPrefetch(ParamProvider& p) : inner(p) {}
    Tensor acquire(int unit, int) override { return inner.acquire(unit, -1); }
    void release(int unit, bool again) override { inner.release(unit, again); }
    ParamProvider& inner;
};

}  // namespace

TEST_SUITE("ch03 np2") {
    TEST_CASE("ZeRO-3 overlap: with prefetch only the first unit of each pass waits for its all-gather (logical clock)") {
        auto world = make_world_comm(CommBackend::mpi);
        Clock clock;
        ClockedComm dp(*world, clock);
        LlamaConfig c = six_units();
        Model m(c, Device::cpu, 5, zero_model_options(ZeroStage::zero3));
        ZeroHooks hooks(m, dp, ZeroStage::zero3, AdamWConfig{});
        m.add_observer(&clock);
        auto data = make_dataset("addition", 5, kByteVocab);
        BatchPlan plan;
        plan.seq = 32, plan.micro_batch = plan.global_batch = 2;
        std::vector<MicroBatch> mbs = make_micro_batches(*data, 0, plan, Device::cpu);
        const int units = (int)c.n_layers + 2;
        hooks.begin_step();
        MicroBatchActs a = m.forward(mbs[0], 50.0);
        INFO("forward: " << clock.on_time << " gathers complete when needed, " << clock.late << " late, exposed "
                         << clock.exposed << " ticks");
        CHECK(clock.late == 1);  // the embedding: nothing before it could fetch it
        CHECK(clock.on_time == units - 1);
        // playbook: 000.04.11 003.2.4 — logical clock: with prefetch only the first unit of a pass waits
        CHECK(clock.exposed == kGather);  // without prefetch: units · kGather
        m.backward(a);
        hooks.finish_gradients();
        INFO("forward + backward: " << clock.on_time << " on time, " << clock.late << " late, exposed " << clock.exposed);
        CHECK(clock.late == 2);  // and the head, first of the backward walk (the embedding is not re-gathered)
        CHECK(clock.on_time == (units - 1) + (units - 2));
        CHECK(clock.exposed == 2 * kGather);  // without prefetch: (2 units - 1) · kGather
        CHECK(clock.now == 3.0 * units + clock.exposed);  // a tick per unit for F, B and W, and the waits
        m.remove_observer(&clock);
    }
    TEST_CASE("ZeRO-3 prefetch: exposed waits with vs without it, and the peak = shard + current unit + prefetched unit") {
        for (bool prefetch : {true, false}) {
            auto world = make_world_comm(CommBackend::mpi);
            Clock clock;
            ClockedComm dp(*world, clock);
            LlamaConfig c = six_units();
            c.tied_embeddings = false;  // a tied table stays gathered through the forward (zero3_params.hpp)
            Model m(c, Device::cpu, 5, zero_model_options(ZeroStage::zero3));
            ReduceGroups groups(dp);
            UnitShards shards(m.layout(), groups);
            Tensor shard = Tensor::empty({shards.numel()}, DType::f32, Device::cpu, Tag::params);  // (S)
            shards.init([&m](const ParamLayout& l, Tensor& t) { m.initial_weights(l, t); }, shard);
            GatheredParams gathered(shards, groups, shard);
            NoPrefetch plain(gathered);
            FullGrads sink(shards, m.n_params());  // a model without full gradients trains into one
            m.set_gradient_sink(&sink);
            m.set_param_provider(prefetch ? static_cast<ParamProvider*>(&gathered) : &plain);
            m.add_observer(&clock);
            auto data = make_dataset("addition", 5, kByteVocab);
            BatchPlan plan;
            plan.seq = 32, plan.micro_batch = plan.global_batch = 2;
            std::vector<MicroBatch> mbs = make_micro_batches(*data, 0, plan, Device::cpu);
            const std::vector<ParamUnit>& u = m.layout().units;
            const int units = (int)u.size();
            REQUIRE(units == 6);
            const std::string mode = prefetch ? "prefetch" : "no prefetch";
            // the gathered weights' peak (Tag::comm) and the params tag's over one pass
            auto pass = [&](const std::function<void()>& run) {
                mem_reset_peak(Device::cpu);
                const MemStats before = mem_stats(Device::cpu);
                run();
                const MemStats after = mem_stats(Device::cpu);
                // the resident shard is the only copy of the weights: the pass adds no parameter bytes
                CHECK(before.current[(int)Tag::params] >= 4 * shards.numel());
                CHECK(after.peak[(int)Tag::params] == before.current[(int)Tag::params]);
                CHECK(gathered.idle());
                return after.peak[(int)Tag::comm] - before.current[(int)Tag::comm];
            };
            // the widest unit, and the widest two consecutive ones, of each walk: forward embedding, layers, head;
            // backward head, layers down (an untied embedding's backward reads no weights: not gathered)
            int64_t one = 0, two = 0, one_b = 0, two_b = 0;
            for (int i = 0; i < units; i++) one = std::max(one, u[i].numel);
            for (int i = 0; i + 1 < units; i++) two = std::max(two, u[i].numel + u[i + 1].numel);
            for (int i = units - 1; i >= 1; i--) one_b = std::max(one_b, u[i].numel);
            for (int i = units - 1; i >= 2; i--) two_b = std::max(two_b, u[i].numel + u[i - 1].numel);
            MicroBatchActs a;
            const int64_t forward_peak = pass([&] { a = m.forward(mbs[0], 50.0); });
            {
                INFO(mode << " forward: " << clock.late << " of " << units << " gathers late, exposed " << clock.exposed
                          << " ticks; gathered weights at most " << forward_peak << " bytes (one unit " << 4 * one
                          << ", two " << 4 * two << ")");
                CHECK(clock.late == (prefetch ? 1 : units));  // with prefetch the embedding only: nothing before it
                CHECK(clock.exposed == (prefetch ? 1 : units) * kGather);
                // playbook: 000.04.11 000.04.15 003.2.3 — peak gathered bytes = current + prefetched unit; exposed
                //   waits with vs without
                CHECK(forward_peak == 4 * (prefetch ? two : one));  // current + prefetched unit, or one at a time
            }
            const int late_f = clock.late;
            const double exposed_f = clock.exposed;
            const int64_t backward_peak = pass([&] { m.backward(a); });
            INFO(mode << " backward: " << clock.late - late_f << " of " << units - 1 << " gathers late, exposed "
                      << clock.exposed - exposed_f << " ticks; gathered weights at most " << backward_peak
                      << " bytes (one unit " << 4 * one_b << ", two " << 4 * two_b << ")");
            CHECK(clock.late - late_f == (prefetch ? 1 : units - 1));  // with prefetch the head only
            CHECK(clock.exposed - exposed_f == (prefetch ? 1 : units - 1) * kGather);
            CHECK(backward_peak == 4 * (prefetch ? two_b : one_b));
            m.remove_observer(&clock);
            m.set_param_provider(nullptr);
            m.set_gradient_sink(nullptr);
        }
    }
    TEST_CASE("ZeRO-1 deferred gather: the next forward waits for its first unit only (logical clock), same weights") {
        std::vector<float> weights[2];
        for (bool defer : {false, true}) {
            auto world = make_world_comm(CommBackend::mpi);
            Clock clock;
            ClockedComm dp(*world, clock);
            const LlamaConfig c = six_units();
            Model m(c, Device::cpu, 5, zero_model_options(ZeroStage::zero1));
            ZeroHooks hooks(m, dp, ZeroStage::zero1, AdamWConfig{});
            if (defer) hooks.defer_weight_gather();
            m.add_observer(&clock);
            Trainer trainer{m, hooks.optimizer(), {&hooks}};
            auto data = make_dataset("addition", 5, kByteVocab);
            TrainConfig cfg;
            cfg.seq = 32;
            cfg.micro_batch = 2;
            const BatchPlan plan = data_parallel_plan(cfg, dp);
            const int units = (int)m.layout().units.size();
            training_step(trainer, *data, 0, plan, 1e-3f, 1.0f);
            const double after_first = clock.exposed;
            training_step(trainer, *data, 1, plan, 1e-3f, 1.0f);
            INFO(std::string(defer ? "deferred" : "waited at once") << ": exposed " << after_first << " ticks after step 1, "
                                                         << clock.exposed << " after step 2");
            if (defer) {
                CHECK(after_first == 0);                // step 1's gathers left in flight
                // playbook: 000.04.6 — logical clock: deferred ZeRO-1 gathers expose only the first unit's
                CHECK(clock.exposed == kGather);        // step 2's forward waits for the embedding only
            } else {
                CHECK(after_first == units * kGather);  // every unit's gather waited for, nothing computing
                CHECK(clock.exposed == 2 * units * kGather);
            }
            weights[defer] = hooks.gather_params().to_host();  // (finishes step 2's gathers)
            m.remove_observer(&clock);
        }
        check_close(weights[1], weights[0], 0, 0, "ZeRO-1 weights after 2 steps, deferred vs waited gathers");
    }
}
