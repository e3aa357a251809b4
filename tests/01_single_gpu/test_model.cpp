// test_model.cpp — chapter 01's Llama decoder: the hand-written backward against finite differences,
// activation recomputation (same gradients, predicted bytes == allocated bytes), gradient accumulation,
// configs and presets, the flat layout and its shard-exact initialisation.
// Playbook: "First steps: training on one GPU". Run: `build/bin/tests_01 -ts='ch01 np1'` (`make test CH=01`).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "../../common/formulas.hpp"
#include "../../common/grid.hpp"
#include "../../common/model.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

constexpr int64_t kB = 2, kT = 8;

ModelOptions options(Recompute r, AttentionKernel k) {
    ModelOptions o;
    o.recompute = r;
    o.attention = k;
    return o;
}

LlamaConfig tiny(bool tied = false) {
    LlamaConfig c = preset("tiny");
    c.tied_embeddings = tied;
    return c;
}

struct Batch {
    Tensor tokens, targets;  // (B T) i32
    double n_targets = 0;    // non-ignored targets
};

// random tokens; the targets are random too, with one ignored (-1) to exercise the ignore index
Batch make_batch(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
    Batch b;
    b.tokens = random_tokens({B * T}, (int32_t)vocab, seed);
    std::vector<int32_t> tg = random_tokens({B * T}, (int32_t)vocab, seed + 1).to_host_i32();
    tg[3] = -1;
    b.targets = Tensor::from_host_i32(tg, {B * T}, Device::cpu);
    b.n_targets = (double)(B * T - 1);
    return b;
}

// Parameters far from init (std 0.02 makes every gradient tiny): matrices N(0, 0.25^2), norms
// 1 + N(0, 0.2^2).
void randomize(Model& m, uint64_t seed) {
    float* p = m.params().ptr<float>();
    for (const ParamTensor& t : m.tensors())
        for (int64_t i = 0; i < t.numel(); i++) {
            float r = rng_normal(seed, name_stream(t.name), (uint64_t)i);
            p[t.offset + i] = t.init_std == 0 ? 1.0f + 0.2f * r : 0.25f * r;
        }
}

std::vector<float> grads_after_step(Model& m, const Batch& b, int64_t B, int64_t T) {
    m.zero_grads();
    m.forward_backward(b.tokens, b.targets, B, T, b.n_targets);
    return m.grads().to_host();
}

int64_t activation_bytes_now() { return mem_stats(Device::cpu).current[(int)Tag::activations]; }

// The model whole and as two pipeline stages (embedding + layer 0 | layer 1 + head), seeds alike. run()
// takes one micro-batch through both stages — the first stage's output is the last's input, the last's
// input gradient the first's output gradient — and returns the last stage's loss.
struct TwoStages {
    static ModelOptions stage(PipelineSlice s) {
        ModelOptions o;
        o.slice = s;
        return o;
    }
    explicit TwoStages(const LlamaConfig& cfg)
        : whole(cfg, Device::cpu, 13), first(cfg, Device::cpu, 13, stage({0, 1, true, false})),
          last(cfg, Device::cpu, 13, stage({1, 2, false, true})) {}
    double run(const Batch& b) {
        first.zero_grads(), last.zero_grads();
        MicroBatchActs a0 = first.forward(MicroBatch::whole(b.tokens, Tensor(), kB, kT), b.n_targets);
        MicroBatchActs a1 = last.forward(MicroBatch::whole(Tensor(), b.targets, kB, kT), b.n_targets, a0.output);
        CHECK(!first.backward(a0, last.backward(a1)).defined());  // the first stage has the embedding
        return a1.loss;
    }
    Model whole, first, last;
};

}  // namespace

TEST_SUITE("ch01 np1") {

TEST_CASE("model: backward matches finite differences for every parameter tensor (untied and tied)") {
    for (bool tied : {false, true}) {
        // untied on the naive kernel, tied on flash: both kernels' backward inside the whole model
        ModelOptions opt;
        opt.attention = tied ? AttentionKernel::flash : AttentionKernel::naive;
        Model m(tiny(tied), Device::cpu, 11, opt);
        randomize(m, 5);
        Batch b = make_batch(kB, kT, m.config().vocab, 21);
        std::vector<float> g = grads_after_step(m, b, kB, kT);
        int checked = 0;
        for (const ParamTensor& t : m.tensors()) {
            Tensor x = m.params().flat(t.offset, t.numel());
            std::vector<float> analytic(g.begin() + t.offset, g.begin() + t.offset + t.numel());
            auto loss = [&] { return m.forward_loss(b.tokens, b.targets, kB, kT, b.n_targets); };
            const std::string what = t.name + (tied ? " (tied)" : " (untied)");
            check_gradient(x, analytic, loss, what, 1e-2, 2e-2, 2e-4, 16);
            checked++;
        }
        CHECK(checked == (int)m.layout().tensors.size());
        CHECK(checked == 1 + 9 * 2 + (tied ? 1 : 2));
    }
}

TEST_CASE("model: recompute none / selective / full give the same gradients") {
    const LlamaConfig cfg = tiny();
    Batch b = make_batch(kB, kT, cfg.vocab, 31);
    for (AttentionKernel k : {AttentionKernel::naive, AttentionKernel::flash}) {
        std::vector<float> ref;
        double ref_loss = 0;
        for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
            CAPTURE(attention_kernel_name(k));
            CAPTURE(recompute_name(r));
            Model m(cfg, Device::cpu, 3, options(r, k));
            m.zero_grads();
            double loss = m.forward_backward(b.tokens, b.targets, kB, kT, b.n_targets);
            std::vector<float> g = m.grads().to_host();
            if (r == Recompute::none) {
                ref = g, ref_loss = loss;
                continue;
            }
            CHECK(loss == ref_loss);
            // full reruns the block forward; selective rebuilds P = exp(s - lse) with the same arithmetic
            // the naive forward used to form it: both bit-for-bit
            CHECK(std::memcmp(g.data(), ref.data(), g.size() * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("model: activation bytes held after forward equal formulas.hpp exactly") {
    const LlamaConfig cfg = tiny();
    Batch b = make_batch(kB, kT, cfg.vocab, 41);
    for (AttentionKernel k : {AttentionKernel::naive, AttentionKernel::flash})
        for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
            CAPTURE(attention_kernel_name(k));
            CAPTURE(recompute_name(r));
            Model m(cfg, Device::cpu, 3, options(r, k));
            const int64_t before = activation_bytes_now();
            MicroBatchActs acts = m.forward(b.tokens, b.targets, kB, kT, b.n_targets);
            // playbook: 000.01.2 000.02.9 000.02.15 000.B.1 003.5.2 — the bytes a forward keeps, by the allocator, =
            //   the formula for every recompute mode and kernel
            CHECK(activation_bytes_now() - before == llama_activation_bytes(cfg, r, k, kB, kT));
            m.backward(acts);
            CHECK(activation_bytes_now() == before);  // backward frees what forward saved
        }
    // the probabilities are the difference between none and selective for the naive kernel only
    CHECK(llama_activation_bytes(cfg, Recompute::none, AttentionKernel::naive, kB, kT) -
              llama_activation_bytes(cfg, Recompute::selective, AttentionKernel::naive, kB, kT) ==
          4 * cfg.n_layers * kB * cfg.n_heads * kT * kT);
    CHECK(llama_activation_bytes(cfg, Recompute::none, AttentionKernel::flash, kB, kT) ==
          llama_activation_bytes(cfg, Recompute::selective, AttentionKernel::flash, kB, kT));
}

TEST_CASE("model: 4 micro-batches of 1 sequence accumulate the gradient of 1 micro-batch of 4") {
    const LlamaConfig cfg = tiny();
    const int64_t B = 4;
    Batch b = make_batch(B, kT, cfg.vocab, 51);
    Model whole(cfg, Device::cpu, 9), accum(cfg, Device::cpu, 9);
    std::vector<float> ref = grads_after_step(whole, b, B, kT);
    double ref_loss = whole.forward_loss(b.tokens, b.targets, B, kT, b.n_targets);
    accum.zero_grads();
    double loss = 0;
    for (int64_t s = 0; s < B; s++)  // the GLOBAL token count divides every micro-batch
        loss += accum.forward_backward(b.tokens.slice(s * kT, kT), b.targets.slice(s * kT, kT), 1, kT,
                                       b.n_targets);
    CHECK(loss == doctest::Approx(ref_loss).epsilon(1e-6));
    double gmax = 0;
    for (float v : ref) gmax = std::max(gmax, (double)std::fabs(v));
    // playbook: 000.02.16 — 4 accumulated micro-batches' gradients = 1 micro-batch of 4
    check_close(accum.grads().to_host(), ref, 1e-6, 1e-6 * gmax, "accumulated vs whole-batch gradients");
}

TEST_CASE("model: an untrained model's loss is about ln(vocab)") {
    for (std::string name : {"tiny", "small"}) {
        Model m(preset(name), Device::cpu, 1);
        Batch b = make_batch(4, 16, m.config().vocab, 61);
        double loss = m.forward_loss(b.tokens, b.targets, 4, 16, b.n_targets);
        CAPTURE(name);
        CHECK(std::fabs(loss - std::log((double)m.config().vocab)) < 0.05);
        Tensor logits = m.forward_logits(b.tokens, 4, 16);
        CHECK(logits.shape == Shape{64, m.config().vocab});
    }
}

TEST_CASE("[gpu] model: on CUDA the same loss and gradients as on the CPU") {
    SKIP_WITHOUT_GPU();
    const LlamaConfig cfg = tiny(true);
    Batch b = make_batch(kB, kT, cfg.vocab, 81);
    for (AttentionKernel k : {AttentionKernel::naive, AttentionKernel::flash}) {
        CAPTURE(attention_kernel_name(k));
        Model cpu(cfg, Device::cpu, 17, options(Recompute::selective, k));
        Model gpu(cfg, Device::cuda, 17, options(Recompute::selective, k));
        CHECK(gpu.params().to_host() == cpu.params().to_host());  // initialised on the CPU, then copied
        std::vector<float> ref = grads_after_step(cpu, b, kB, kT);
        gpu.zero_grads();
        Tensor tokens = b.tokens.clone(Device::cuda, Tag::workspace);
        Tensor targets = b.targets.clone(Device::cuda, Tag::workspace);
        double loss = gpu.forward_backward(tokens, targets, kB, kT, b.n_targets);
        double ref_loss = cpu.forward_loss(b.tokens, b.targets, kB, kT, b.n_targets);
        CHECK(loss == doctest::Approx(ref_loss).epsilon(1e-5));
        double gmax = 0;
        for (float v : ref) gmax = std::max(gmax, (double)std::fabs(v));
        check_close(gpu.grads().to_host(), ref, 1e-3, 1e-4 * gmax, "cuda vs cpu gradients");
    }
}

TEST_CASE("model: two pipeline stages compute the loss and gradients of the whole model") {
    const LlamaConfig cfg = tiny();
    Batch b = make_batch(kB, kT, cfg.vocab, 71);
    TwoStages m(cfg);
    Model& whole = m.whole;
    std::vector<float> ref = grads_after_step(whole, b, kB, kT);
    CHECK(m.run(b) == whole.forward_loss(b.tokens, b.targets, kB, kT, b.n_targets));
    // every tensor of a stage has the same name, init and gradient as in the whole model
    for (Model* s : {&m.first, &m.last}) {
        std::vector<float> g = s->grads().to_host(), p = s->params().to_host(), pw = whole.params().to_host();
        for (const ParamTensor& t : s->tensors()) {
            const ParamTensor& w = whole.layout().find(t.name);
            CHECK(std::memcmp(&p[t.offset], &pw[w.offset], t.numel() * sizeof(float)) == 0);
            check_close(std::vector<float>(g.begin() + t.offset, g.begin() + t.offset + t.numel()),
                        std::vector<float>(ref.begin() + w.offset, ref.begin() + w.offset + t.numel()), 1e-6,
                        1e-9, t.name);
        }
    }
}

TEST_CASE("model: a tied model's last stage holds a replica of the embedding in its embedding unit; the two stages' gradients sum to the whole's") {
    const LlamaConfig cfg = tiny(true);
    Batch b = make_batch(kB, kT, cfg.vocab, 72);
    TwoStages m(cfg);
    Model &whole = m.whole, &s0 = m.first, &s1 = m.last;
    const std::string emb = "model.embed_tokens.weight";
    const ParamTensor& replica = s1.layout().find(emb);
    // in the embedding unit, which the head reads, so both stages cut the table alike (ZeRO's shards match)
    CHECK(replica.unit == s1.layout().embedding_unit());
    CHECK(s1.layout().units[s1.layout().head_unit()].tensors.size() == 1);  // the head: the final norm only
    CHECK(!(replica.sharded_on & kAxisPP));       // both stages hold the whole table...
    CHECK((replica.grad_summed_on & kAxisPP));    // ...and each computes part of its gradient
    CHECK((s0.layout().find(emb).grad_summed_on & kAxisPP));
    GridCoords first_stage, last_stage;
    last_stage.pp = 1;
    CHECK(counts_in_grad_norm(s0.layout().find(emb), first_stage));
    CHECK(!counts_in_grad_norm(replica, last_stage));  // counted once, on the first stage
    std::vector<float> ref = grads_after_step(whole, b, kB, kT);
    CHECK(m.run(b) == whole.forward_loss(b.tokens, b.targets, kB, kT, b.n_targets));
    const ParamTensor& e0 = s0.layout().find(emb);
    const ParamTensor& ew = whole.layout().find(emb);
    std::vector<float> g0 = s0.grads().to_host(), g1 = s1.grads().to_host(), p0 = s0.params().to_host(),
                       p1 = s1.params().to_host(), sum(e0.numel());
    CHECK(std::memcmp(&p0[e0.offset], &p1[replica.offset], e0.numel() * sizeof(float)) == 0);  // same init
    for (int64_t i = 0; i < e0.numel(); i++) sum[i] = g0[e0.offset + i] + g1[replica.offset + i];
    check_close(sum, std::vector<float>(ref.begin() + ew.offset, ref.begin() + ew.offset + ew.numel()), 1e-6, 1e-9,
                "embedding gradient: first stage + last stage's replica");
}

TEST_CASE("model config: presets, parameter counts, formulas") {
    for (const std::string& name : preset_names()) preset(name).validate();
    // the parameter counts Hugging Face reports for these checkpoints
    CHECK(preset("smollm-135m").n_params() == 134515008);
    CHECK(preset("smollm-360m").n_params() == 361821120);
    CHECK(preset("llama3.2-1b").n_params() == 1235814400);
    // playbook: 000.02.5 — our Llama's exact parameter count
    CHECK(preset("llama3-8b").n_params() == 8030261248);
    CHECK(preset("llama3-70b").n_params() == 70553706496);
    CHECK(contains(error_of([] { preset("gpt5"); }), "llama3-8b"));
    // the playbook's GPT count with h = 4096, v = 128256, L = 32 vs our GQA + SwiGLU Llama-3-8B
    CHECK(playbook_param_count(4096, 128256, 32) ==
          4096LL * 128256 + 32 * (12LL * 4096 * 4096 + 13 * 4096) + 8192);
    CHECK(model_state_bytes_fp32(1000).total() == 16000);
    CHECK(model_state_bytes_bf16_mixed(1000).total() == 16000);
    CHECK(model_state_bytes_bf16_mixed(1000, true).total() == 20000);
    CHECK(playbook_activation_bytes_per_layer(Recompute::none, 2048, 1, 4096, 32) ==
          2048LL * 4096 * (34 + 5 * 32 * 2048 / 4096));
    CHECK(parse_recompute("selective") == Recompute::selective);
    CHECK(contains(error_of([] { parse_attention_kernel("fast"); }), "naive|flash"));
}

TEST_CASE("model config: invalid configs name the rule") {
    auto err = [](int64_t h, int64_t nh, int64_t nkv) {
        LlamaConfig c = tiny();
        c.hidden = h, c.n_heads = nh, c.n_kv_heads = nkv;
        return error_of([&] { c.validate(); });
    };
    CHECK(err(32, 4, 2) == "");
    CHECK(contains(err(32, 6, 4), "multiple of n_heads"));
    CHECK(contains(err(32, 4, 3), "multiple of n_kv_heads"));
    CHECK(contains(err(12, 4, 2), "even"));
    CHECK(contains(error_of([] { ParamLayout::build(tiny(), 3, 0); }), "tp 3 must divide n_heads 4"));
    CHECK(contains(error_of([] { ParamLayout::build(tiny(), 4, 0); }), "tp 4 must divide n_kv_heads 2"));
    CHECK(contains(error_of([] { ParamLayout::build(tiny(), 1, 0, {0, 3, true, true}); }), "pipeline slice"));
}

TEST_CASE("model config: load_hf_config reads config.json and names file and key in errors") {
    const std::string path = "/tmp/penta_test_config_" + std::to_string(getpid()) + ".json";
    auto write = [&](const std::string& text) { std::ofstream(path) << text; };
    write(R"({"model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
              "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152,
              "max_position_embeddings": 2048, "rope_theta": 10000.0, "rms_norm_eps": 1e-05,
              "tie_word_embeddings": true, "head_dim": 64})");
    LlamaConfig c = load_hf_config(path), p = preset("smollm-135m");
    CHECK(c.n_params() == p.n_params());
    CHECK((c.hidden == p.hidden && c.n_layers == p.n_layers && c.n_heads == p.n_heads &&
           c.n_kv_heads == p.n_kv_heads && c.ffn == p.ffn && c.vocab == p.vocab && c.max_seq == p.max_seq &&
           c.rope_theta == p.rope_theta && c.norm_eps == p.norm_eps &&
           c.tied_embeddings == p.tied_embeddings));
    // a key left out takes transformers' default for the model_type (LlamaConfig, MixtralConfig in 4.46)
    write(R"({"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
              "vocab_size": 64})");
    c = load_hf_config(path);
    CHECK((c.max_seq == 2048 && c.n_kv_heads == 4 && c.rope_theta == 10000.0 && c.norm_eps == 1e-6));
    write(R"({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2, "hidden_size": 32,
              "num_hidden_layers": 2, "num_attention_heads": 16, "intermediate_size": 64, "vocab_size": 64})");
    c = load_hf_config(path);
    CHECK((c.max_seq == 131072 && c.n_kv_heads == 8 && c.rope_theta == 1e6 && c.norm_eps == 1e-5));
    write(R"({"num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 64,
              "max_position_embeddings": 32})");
    std::string e = error_of([&] { load_hf_config(path); });
    CHECK(contains(e, path));
    CHECK(contains(e, "\"hidden_size\""));
    write(R"({"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
              "vocab_size": 64, "max_position_embeddings": 32, "head_dim": 16})");
    c = load_hf_config(path);  // a head_dim of its own: q_proj is (heads · head_dim, hidden)
    CHECK(c.head_dim() == 16);
    CHECK(ParamLayout::build(c).find("model.layers.0.self_attn.q_proj.weight").full_shape == Shape{64, 32});
    CHECK(c.n_params() == (int64_t)ParamLayout::build(c).numel);
    write(R"({"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3,
              "intermediate_size": 64, "vocab_size": 64, "max_position_embeddings": 32})");
    CHECK(contains(error_of([&] { load_hf_config(path); }), "n_kv_heads"));
    std::remove(path.c_str());
    CHECK(contains(error_of([&] { load_hf_config(path); }), "cannot open"));
}

TEST_CASE("model layout: contiguous layer-major units, HF names; tp > 1 needs a sharding plan (chapter 04)") {
    const LlamaConfig cfg = tiny();
    ParamLayout full = ParamLayout::build(cfg);
    CHECK(full.numel == cfg.n_params());
    CHECK(full.units.size() == (size_t)cfg.n_layers + 2);
    int64_t next = 0;
    for (const ParamUnit& u : full.units) {
        CHECK(u.offset == next);
        for (int t : u.tensors) CHECK(full.tensors[t].offset >= u.offset);
        next += u.numel;
    }
    CHECK(next == full.numel);
    CHECK(full.find("model.layers.1.self_attn.q_proj.weight").unit == 2);
    CHECK(!full.find("model.layers.0.input_layernorm.weight").decay);
    CHECK(full.find("lm_head.weight").unit == full.head_unit());

    // which part of a tensor a tp rank holds is chapter 04's rule (tests/04_tensor_parallel/test_parallel_layers.cpp)
    CHECK(contains(error_of([&] { ParamLayout::build(cfg, 2, 0); }), "needs a sharding plan"));
}

}  // TEST_SUITE
