// test_offload.cpp — `--recompute offload` (common/offload.hpp): each layer's saved activations are moved to
// the host after its forward and back before its backward. The same numbers as keeping them (bit for bit),
// the device holding one layer at a time, the host holding the layers by the formula, the bytes moved
// counted both ways; the step's activation table and the memory table show it.
//
// Playbook: "Activation recomputation" — offloading to host memory is the other way out of activation
// memory: it costs transfers instead of FLOPs.
//   make test CH=01     or     build/bin/tests_01 -ts='ch01 np1' -tc='offload*'
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>

#include "../../common/formulas.hpp"
#include "../../common/model.hpp"
#include "../../common/train_loop.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

constexpr int64_t kB = 2, kT = 16;

struct Run {
    std::vector<double> losses;
    std::vector<float> grads;
    int64_t act_peak = 0, host_peak = 0;  // Tag::activations, Tag::offloaded
    OffloadStats moved;
};

// two micro-batches, each forward then backward (gradient accumulation), on a fresh model
Run run(Recompute r, AttentionKernel k) {
    LlamaConfig cfg = preset("tiny");
    ModelOptions o;
    o.recompute = r;
    o.attention = k;
    Model m(cfg, Device::cpu, 11, o);
    mem_reset_peak(Device::cpu);
    const int64_t act0 = mem_stats(Device::cpu).current[(int)Tag::activations];
    const int64_t host0 = mem_stats(Device::cpu).current[(int)Tag::offloaded];
    Run out;
    for (int i = 0; i < 2; i++) {
        MicroBatch mb = MicroBatch::whole(random_tokens({kB * kT}, (int32_t)cfg.vocab, 500 + i),
                                          random_tokens({kB * kT}, (int32_t)cfg.vocab, 600 + i), kB, kT, i);
        MicroBatchActs a = m.forward(mb, 2.0 * kB * kT);
        out.losses.push_back(a.loss);
        m.backward(a, Tensor());
    }
    out.grads = m.grads().to_host();
    out.act_peak = mem_stats(Device::cpu).peak[(int)Tag::activations] - act0;
    out.host_peak = mem_stats(Device::cpu).peak[(int)Tag::offloaded] - host0;
    out.moved = m.offload_stats();
    CHECK(mem_stats(Device::cpu).current[(int)Tag::offloaded] == host0);  // nothing left on the host
    return out;
}

// what f prints to stdout
std::string stdout_of(const std::function<void()>& f) {
    std::fflush(stdout);
    FILE* tmp = std::tmpfile();
    const int saved = dup(fileno(stdout));
    dup2(fileno(tmp), fileno(stdout));
    f();
    std::fflush(stdout);
    dup2(saved, fileno(stdout));
    close(saved);
    std::string out;
    std::rewind(tmp);
    for (int c; (c = std::fgetc(tmp)) != EOF;) out += (char)c;
    std::fclose(tmp);
    return out;
}

}  // namespace

TEST_SUITE("ch01 np1") {

TEST_CASE("offload: bitwise the training of recompute none; the device keeps one layer, the host the rest by the formula") {
    const LlamaConfig cfg = preset("tiny");
    for (AttentionKernel k : {AttentionKernel::naive, AttentionKernel::flash}) {
        INFO("attention " << std::string(attention_kernel_name(k)));
        const Run none = run(Recompute::none, k), off = run(Recompute::offload, k);
        // the same numbers: moving a buffer changes where its bytes live, not what they are
        REQUIRE(none.losses.size() == off.losses.size());
        for (size_t i = 0; i < none.losses.size(); i++) CHECK(std::memcmp(&none.losses[i], &off.losses[i], sizeof(double)) == 0);
        REQUIRE(none.grads.size() == off.grads.size());
        CHECK(std::memcmp(none.grads.data(), off.grads.data(), none.grads.size() * sizeof(float)) == 0);
        CHECK(sum_squares(Tensor::from_host(none.grads, {(int64_t)none.grads.size()}, Device::cpu)) > 0);

        const int64_t layer = llama_layer_activation_bytes(Recompute::offload, k, kB, kT, cfg.hidden, cfg.n_heads,
                                                           cfg.n_kv_heads, cfg.head_dim(), cfg.ffn);
        const int64_t head = llama_head_activation_bytes(kB, kT, cfg.hidden, cfg.vocab);
        // offload keeps what none keeps: its per-layer formula is none's
        CHECK(layer == llama_layer_activation_bytes(Recompute::none, k, kB, kT, cfg.hidden, cfg.n_heads,
                                                    cfg.n_kv_heads, cfg.head_dim(), cfg.ffn));
        // recompute none: every layer and the head on the device at the end of a forward
        CHECK(none.act_peak >= cfg.n_layers * layer + head);
        CHECK(none.host_peak == 0);
        CHECK(none.moved.bytes_to_host == 0);
        // offload: one micro-batch in flight, so the host holds exactly its L layers at the peak...
        // playbook: 003.5.4 — offload: the host holds L x the layer's bytes, the device one layer
        CHECK(off.host_peak == cfg.n_layers * layer);
        // ...and the device at most one layer being computed (or back for its backward) and the head
        CHECK(off.act_peak <= layer + head);
        CHECK(off.act_peak < none.act_peak);
        // every byte of every layer went out and came back, once per micro-batch
        CHECK(off.moved.bytes_to_host == 2 * cfg.n_layers * layer);
        CHECK(off.moved.bytes_to_device == off.moved.bytes_to_host);
        MESSAGE("attention " << std::string(attention_kernel_name(k)) << ": device activations peak " << none.act_peak << " -> "
                             << off.act_peak << " bytes, host " << off.host_peak << " (= " << cfg.n_layers << " x "
                             << layer << "), moved " << off.moved.bytes_to_host << " each way in " << off.moved.buffers
                             << " buffers");
    }
}

TEST_CASE("offload: the activation table and the memory table of chapter 01 show the host's share") {
    LlamaConfig mc = preset("tiny");
    mc.vocab = kByteVocab;
    auto data = make_dataset("addition", 1, (int32_t)kByteVocab);
    TrainConfig cfg;
    cfg.recompute = "offload";
    cfg.seq = 16, cfg.micro_batch = 2, cfg.steps = 2, cfg.eval_every = 0;
    cfg.validate();
    Model model(mc, Device::cpu, 1, model_options(cfg));
    CHECK(model.options().recompute == Recompute::offload);
    AdamW optim(model.params(), model.grads(), optimizer_ranges(model), AdamWConfig{}, false);
    Trainer trainer{model, optim};
    TrainLoop loop{trainer, *data, cfg, batch_plan(cfg), StepLogConfig{}, {}, {}};
    loop.log.print = false;
    mem_reset_peak(Device::cpu);
    const int64_t saved = run_training(loop).saved_activation_bytes;
    const int64_t layer = llama_layer_activation_bytes(Recompute::offload, model.options().attention, 2, 16, mc.hidden,
                                                       mc.n_heads, mc.n_kv_heads, mc.head_dim(), mc.ffn);
    // what one micro-batch's forward kept, device and host together: the same as none's
    CHECK(saved == mc.n_layers * layer + llama_head_activation_bytes(2, 16, mc.hidden, mc.vocab));
    CHECK(model.offload_stats().bytes_to_host == 2 * mc.n_layers * layer);  // 2 steps of one micro-batch
    const std::string table = stdout_of([&] { print_activation_table(model, cfg, saved); });
    CHECK(contains(table, "(Tag::offloaded)"));
    CHECK(contains(table, strfmt("= %ld layers x %ld", (long)mc.n_layers, (long)layer)));
    CHECK(contains(memory_table(Device::cpu), "offloaded"));
    CHECK(contains(error_of([] {
                       TrainConfig bad;
                       bad.recompute = "offlaod";
                       bad.validate();
                   }),
                   "--recompute offlaod must be none, selective, full or offload"));
}

}  // TEST_SUITE
