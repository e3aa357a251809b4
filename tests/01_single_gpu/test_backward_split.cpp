// test_backward_split.cpp — the backward in two halves (model.hpp): the input-gradient pass B and the
// weight-gradient pass W, run separately, give the fused backward's gradients bit for bit, for every layer
// kind (embedding, decoder block under each recompute mode and kernel, head tied and untied, the stages of a
// pipeline, a tied model's last stage with its embedding replica); W reads no weight; observers see each
// pass; a zero-bubble order (every forward, every B, then every W) accumulates the same bits.
// Playbook: "Pipeline parallelism" — ZeroBubble splits backward into B and W. Run: `make test CH=01`.
#include <cstring>

#include "../../common/model.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

constexpr int64_t kB = 2, kT = 8;

struct Case {
    bool tied;
    AttentionKernel kernel;
    Recompute recompute;
    PipelineSlice slice;  // the default: the whole model
};

std::string name(const Case& c) {
    return strfmt("%s, %s, recompute %s, layers [%lld, %lld)%s%s", c.tied ? "tied" : "untied",
                  attention_kernel_name(c.kernel), recompute_name(c.recompute), (long long)c.slice.layer_begin,
                  (long long)c.slice.layer_end, c.slice.has_embedding ? " +embedding" : "",
                  c.slice.has_head ? " +head" : "");
}

Model make_model(const Case& c) {
    LlamaConfig cfg = preset("tiny");
    cfg.tied_embeddings = c.tied;
    ModelOptions o;
    o.attention = c.kernel;
    o.recompute = c.recompute;
    o.slice = c.slice;
    return Model(cfg, Device::cpu, 17, o);
}

// the micro-batch i of the test: tokens, targets (one ignored), a stage input and the gradient of a stage
// output, all fixed by i
struct Inputs {
    MicroBatch mb;
    Tensor hidden, d_out;
};
Inputs inputs(const LlamaConfig& cfg, int i) {
    std::vector<int32_t> tg = random_tokens({kB * kT}, (int32_t)cfg.vocab, 100 + i).to_host_i32();
    tg[1] = -1;
    Inputs in;
    in.mb = MicroBatch::whole(random_tokens({kB * kT}, (int32_t)cfg.vocab, 200 + i),
                              Tensor::from_host_i32(tg, {kB * kT}, Device::cpu), kB, kT, i);
    in.hidden = random_tensor({kB * kT, cfg.hidden}, 300 + i);
    in.d_out = random_tensor({kB * kT, cfg.hidden}, 400 + i, 1e-2f);
    return in;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
    if (a.defined() != b.defined()) return false;
    if (!a.defined()) return true;
    std::vector<float> x = a.to_host(), y = b.to_host();
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// Counts what the model acquires, to prove W reads no weight.
struct CountingParams : ParamProvider {
    explicit CountingParams(Model& m) : resident(m.layout(), m.params()) {}
    Tensor acquire(int unit, int next) override {
        acquires++;
        return resident.acquire(unit, next);
    }
    void release(int unit, bool again) override { resident.release(unit, again); }
    ResidentParams resident;
    int acquires = 0;
};

// Records the passes the model reports.
struct PassLog : ModelObserver {
    void unit_begin(int unit, Pass p) override { log.push_back(strfmt("%s %d", pass_name(p), unit)); }
    void unit_end(int, Pass) override { ends++; }
    std::vector<std::string> log;
    int ends = 0;
};

// Two micro-batches: fused backward of each in turn, against every forward, every B, every W.
void check_case(const Case& c) {
    INFO(name(c));
    Model fused = make_model(c), split = make_model(c);
    const LlamaConfig& cfg = fused.config();
    const double tokens = 2.0 * (kB * kT - 1);
    std::vector<Tensor> d_in_fused;
    for (int i = 0; i < 2; i++) {
        Inputs in = inputs(cfg, i);
        MicroBatchActs a = fused.forward(in.mb, tokens, c.slice.has_embedding ? Tensor() : in.hidden);
        d_in_fused.push_back(fused.backward(a, c.slice.has_head ? Tensor() : in.d_out));
    }

    CountingParams counting(split);
    PassLog passes;
    split.set_param_provider(&counting);
    split.add_observer(&passes);
    std::vector<Inputs> ins = {inputs(cfg, 0), inputs(cfg, 1)};
    std::vector<MicroBatchActs> acts;
    for (int i = 0; i < 2; i++) acts.push_back(split.forward(ins[i].mb, tokens, c.slice.has_embedding ? Tensor() : ins[i].hidden));
    std::vector<Tensor> d_in_split;
    for (int i = 0; i < 2; i++) d_in_split.push_back(split.backward_input(acts[i], c.slice.has_head ? Tensor() : ins[i].d_out));
    const int acquired_before_w = counting.acquires;
    const int64_t activations_before_w = mem_stats(Device::cpu).current[(int)Tag::activations];
    for (int i = 0; i < 2; i++) split.backward_weight(acts[i]);
    CHECK(counting.acquires == acquired_before_w);  // W reads no weight (ZeRO-3 need not gather for it)
    CHECK(mem_stats(Device::cpu).current[(int)Tag::activations] <= activations_before_w);  // W frees

    for (int i = 0; i < 2; i++) CHECK(bitwise_equal(d_in_split[i], d_in_fused[i]));  // the stage input's gradient
    // every gradient bit for bit (a gradient that no element of either run touches would prove nothing)
    CHECK(bitwise_equal(split.grads(), fused.grads()));
    CHECK(sum_squares(fused.grads()) > 0);
    // the passes: forward, B and W of every unit of the stage, each begun and ended
    int fwd = 0, b = 0, w = 0;
    for (const std::string& s : passes.log) {
        fwd += s.rfind("forward", 0) == 0;
        b += s.rfind("backward (input)", 0) == 0;
        w += s.rfind("backward (weights)", 0) == 0;
    }
    const PipelineSlice& s = split.layout().slice;  // layer_end resolved
    const int units = (int)(s.layer_end - s.layer_begin) + s.has_embedding + s.has_head;
    CHECK(fwd == 2 * units);
    CHECK(b == 2 * units);
    CHECK(w == 2 * units);
    CHECK(passes.ends == (int)passes.log.size());
    split.remove_observer(&passes);
    split.set_param_provider(nullptr);
}

}  // namespace

TEST_SUITE("ch01 np1") {

TEST_CASE("backward split: every B then every W equals the fused backward bitwise, for every layer kind") {
    const PipelineSlice whole{0, -1, true, true};
    for (bool tied : {false, true})
        for (AttentionKernel k : {AttentionKernel::naive, AttentionKernel::flash})
            for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full, Recompute::offload})
                // playbook: 000.08.7 — every B then every W = the fused backward, bitwise
                check_case(Case{tied, k, r, whole});
}

TEST_CASE("backward split: pipeline stages (embedding + first layer; last layer + head; a tied last stage)") {
    for (bool tied : {false, true}) {
        check_case(Case{tied, AttentionKernel::flash, Recompute::none, PipelineSlice{0, 1, true, false}});
        check_case(Case{tied, AttentionKernel::flash, Recompute::full, PipelineSlice{1, 2, false, true}});
    }
    check_case(Case{false, AttentionKernel::naive, Recompute::selective, PipelineSlice{1, 2, false, false}});
    // offload on a middle stage: the received input is not moved (only what the stage's blocks kept)
    check_case(Case{false, AttentionKernel::naive, Recompute::offload, PipelineSlice{0, 2, false, false}});
}

TEST_CASE("backward split: W before B, or B twice, is refused") {
    Model m = make_model(Case{false, AttentionKernel::flash, Recompute::none, PipelineSlice{}});
    Inputs in = inputs(m.config(), 0);
    MicroBatchActs a = m.forward(in.mb, 15.0);
    CHECK(contains(error_of([&] { m.backward_weight(a); }), "not done yet"));
    m.backward_input(a);
    CHECK(contains(error_of([&] { m.backward_input(a); }), "already done"));
    m.backward_weight(a);
}

}  // TEST_SUITE
