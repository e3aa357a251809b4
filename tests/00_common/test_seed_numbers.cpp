// test_seed_numbers.cpp — the figures the two seed documents quote (the playbook and its notes:
// docs/PLAYBOOK_MAP.md lists them), recomputed from the formula functions of common/formulas.hpp (and
// ring_bytes of comm.hpp) with each model's real dimensions, compared at the precision the seed prints them.
// Where a figure does not come out, the case says why and asserts what does (docs/PLAYBOOK_MAP.md has the row
// for every claim).
//
// Playbook: "Memory usage in Transformers", "Activation recomputation", "Data parallelism", "ZeRO",
// "Tensor parallelism"; seed 003 (Llama 3 8B / 70B on 512 H100).
//   make test CH=00     or     build/bin/tests_00 -ts='ch00 np1' -tc='seed*'
#include <cmath>

#include "../../common/comm.hpp"
#include "../../common/formulas.hpp"
#include "../testing.hpp"

using namespace penta;

namespace {

constexpr double GB = 1e9;  // the seeds' GB are decimal: 2.87 GB is 2 868 903 936 bytes

// x printed with `decimals` decimals, as the seed prints its figure
double rounded(double x, int decimals) {
    const double p = std::pow(10.0, decimals);
    return std::round(x * p) / p;
}

// GPT-3 175B (Brown et al. 2020): h 12288, 96 heads, 96 layers, vocab 50257, sequence 2048
constexpr int64_t kGptH = 12288, kGptA = 96, kGptL = 96, kGptV = 50257, kGptS = 2048;

// Llama 3.1 405B's config.json (meta-llama/Llama-3.1-405B; no preset here: nothing trains it)
LlamaConfig llama31_405b() {
    LlamaConfig c = preset("llama3-70b");
    c.name = "llama3.1-405b";
    c.hidden = 16384, c.n_layers = 126, c.n_heads = 128, c.n_kv_heads = 8, c.ffn = 53248;
    return c;
}
// Llama 2 7B's config.json (meta-llama/Llama-2-7b-hf): vocab 32000, MHA (32 kv heads), ffn 11008
LlamaConfig llama2_7b() {
    LlamaConfig c = preset("llama3-8b");
    c.name = "llama2-7b";
    c.vocab = 32000, c.n_kv_heads = 32, c.ffn = 11008;
    return c;
}

}  // namespace

TEST_SUITE("ch00 np1") {

TEST_CASE("seed numbers: GPT-3 175B activations, 2.87 GB a layer and 275 GB for 96 layers (s 2048, b 1)") {
    // seed 000 "Activation 显存" and seed 003 "激活重计算": s b h (34 + 5 a s / h) bytes a layer
    CHECK(rounded(playbook_param_count(kGptH, kGptV, kGptL) / 1e9, 0) == 175);  // the formula N = hv + L(12h^2+13h) + 2h
    const double layer = (double)playbook_activation_bytes_per_layer(Recompute::none, kGptS, 1, kGptH, kGptA);
    CHECK(rounded(layer / GB, 2) == 2.87);
    CHECK(rounded(kGptL * layer / GB, 0) == 275);
    // linear in b, quadratic in s (the 5 a s^2 b term): doubling s more than doubles it
    CHECK(playbook_activation_bytes_per_layer(Recompute::none, kGptS, 2, kGptH, kGptA) == 2 * (int64_t)layer);
    CHECK(playbook_activation_bytes_per_layer(Recompute::none, 2 * kGptS, 1, kGptH, kGptA) > 2 * (int64_t)layer);
    MESSAGE("GPT-3 175B: " << layer / GB << " GB a layer, " << kGptL * layer / GB << " GB for 96 layers");
}

TEST_CASE("seed numbers: selective recomputation on GPT-3 175B: -70% activations; the +2.7% is the forward's share") {
    const double none = (double)playbook_activation_bytes_per_layer(Recompute::none, kGptS, 1, kGptH, kGptA);
    const double sel = (double)playbook_activation_bytes_per_layer(Recompute::selective, kGptS, 1, kGptH, kGptA);
    CHECK(rounded(1 - sel / none, 2) == 0.70);  // 80 of 114 sbh: the [a, s, s] terms

    const double fwd = playbook_layer_forward_flops(kGptS, 1, kGptH), step = 3 * fwd;  // backward = 2 forwards
    // full recomputation reruns the forward: +1/3 of the step's FLOPs (seed 003), exactly
    CHECK(playbook_recompute_flops_per_layer(Recompute::full, kGptS, 1, kGptH) / step == doctest::Approx(1.0 / 3));
    // selective reruns Q K^T and P V, 4 b s^2 h: 0.90% of the step. The seeds' 2.7% is that over the forward
    // alone, 4 b s^2 h / (24 b s h^2 + 4 b s^2 h) = s / (6h + s) (Korthikanti et al. quote it against their
    // model-FLOPs formula, whose attention term it equals); of a whole step it is a third of that.
    const double sel_flops = playbook_recompute_flops_per_layer(Recompute::selective, kGptS, 1, kGptH);
    CHECK(rounded(100 * sel_flops / fwd, 1) == 2.7);
    CHECK(rounded(100 * sel_flops / step, 1) == 0.9);
    MESSAGE("selective: " << 100 * (1 - sel / none) << "% fewer activation bytes, +" << 100 * sel_flops / step
                          << "% of the step's FLOPs (+" << 100 * sel_flops / fwd << "% of the forward's)");
}

TEST_CASE("seed numbers: the 1B ... 405B model-state table is 16 (20) bytes times the NOMINAL size") {
    // seed 000 "直观感受": 1B 16/20 GB, 7B 112/140, 70B 1120/1400, 405B 6480/8100
    struct Row {
        LlamaConfig model;
        double nominal;       // the size in the model's name
        double b16, b20;      // the seed's GB
    };
    const Row rows[] = {{preset("llama3.2-1b"), 1e9, 16, 20},
                        {llama2_7b(), 7e9, 112, 140},
                        {preset("llama3-70b"), 70e9, 1120, 1400},
                        {llama31_405b(), 405e9, 6480, 8100}};
    for (const Row& r : rows) {
        const int64_t nominal = (int64_t)r.nominal;
        CHECK(model_state_bytes_bf16_mixed(nominal).total() / GB == r.b16);
        CHECK(model_state_bytes_bf16_mixed(nominal, true).total() / GB == r.b20);
        CHECK(model_state_bytes_fp32(nominal).total() / GB == r.b16);  // "FP32 or BF16 w/o FP32 grad": the same 16
        // The real models are not their nominal sizes (Llama 3.2 1B has 1.24 B parameters, its tied embedding
        // alone 0.26 B), so with the real counts the rows move by as much as the count does: the seed's table
        // is bytes-per-parameter arithmetic, not these models.
        const int64_t n = r.model.n_params();
        const double real16 = model_state_bytes_bf16_mixed(n).total() / GB;
        CHECK(real16 == doctest::Approx(16.0 * (double)n / GB));
        MESSAGE(r.model.name << ": " << n << " parameters -> " << real16 << " GB (16 B), "
                             << model_state_bytes_bf16_mixed(n, true).total() / GB << " GB (20 B); the seed: " << r.b16
                             << " / " << r.b20);
    }
    // the real counts: within 1% for 70B and 405B, not for 1B (+24%) or Llama 2 7B (-3.7%)
    CHECK(std::abs(preset("llama3-70b").n_params() / 70e9 - 1) < 0.01);
    CHECK(std::abs(llama31_405b().n_params() / 405e9 - 1) < 0.01);
    CHECK(preset("llama3.2-1b").n_params() / 1e9 > 1.2);
    // "7B already exceeds one 80 GB H100": with the real 6.74 B parameters too
    CHECK(model_state_bytes_bf16_mixed(llama2_7b().n_params()).total() > 80 * GB);
}

TEST_CASE("seed numbers: Llama 3 8B's model state is 128.5 GB; one DP sync on 64 GPUs about 0.63 s") {
    const LlamaConfig c = preset("llama3-8b");
    const int64_t psi = c.n_params();
    CHECK(rounded(model_state_bytes_bf16_mixed(psi).total() / GB, 1) == 128.5);
    // ZeRO per-rank model state (seed 003): 4Ψ + 12Ψ/K, 2Ψ + 14Ψ/K, 16Ψ/K — here K = 64, and Ψ rounded to a
    // multiple of K so that Ψ/K is exact
    const int K = 64;
    const int64_t p = psi / K * K;
    CHECK(zero_model_state_bytes_bf16_mixed(1, p, K).total() == 4 * p + 12 * p / K);
    CHECK(zero_model_state_bytes_bf16_mixed(2, p, K).total() == 2 * p + 14 * p / K);
    CHECK(zero_model_state_bytes_bf16_mixed(3, p, K).total() == 16 * p / K);
    // Ring all-reduce of bf16 gradients, 2(K-1)/K · M bytes a rank (ring_bytes, what Comm counts); at
    // 50 GB/s a GPU (one 400 Gb/s NIC each, the seed's inter-node figure: it also gives TP's 1.50 s below)
    const double bytes = ring_bytes(CommOp::all_reduce, K, 2.0 * (double)psi);
    CHECK(rounded(bytes / 50e9, 2) == 0.63);
    // the bandwidth term does not grow with K: 2(K-1)/K -> 2
    CHECK(ring_bytes(CommOp::all_reduce, 512, 1.0) < 2.0);
    CHECK(ring_bytes(CommOp::all_reduce, 512, 1.0) > ring_bytes(CommOp::all_reduce, 64, 1.0));
    // seed 000: reduce-scatter moves half an all-reduce's bytes ("2x faster", bandwidth-bound)
    CHECK(ring_bytes(CommOp::all_reduce, K, 1.0) == 2 * ring_bytes(CommOp::reduce_scatter, K, 1.0));
    MESSAGE("Llama 3 8B: " << psi << " parameters, " << model_state_bytes_bf16_mixed(psi).total() / GB
                           << " GB of model state; all-reduce " << bytes / GB << " GB -> " << bytes / 50e9
                           << " s at 50 GB/s");
}

TEST_CASE("seed numbers: Llama 3 70B's TP traffic, 75.2 GB a micro-batch; 0.17 s on NVLink, 1.50 s between nodes") {
    // seed 003: 8 (t-1)/t · s b h elements a layer, t 8, s 8192, b 1, bf16, 80 layers
    const LlamaConfig c = preset("llama3-70b");
    const double elems = tp_layer_comm_elements(8, 8192, 1, c.hidden) * (double)c.n_layers;
    const double bytes = 2 * elems;
    CHECK(rounded(bytes / GB, 1) == 75.2);
    CHECK(rounded(bytes / 450e9, 2) == 0.17);  // H100 NVLink: 450 GB/s each way
    CHECK(rounded(bytes / 50e9, 2) == 1.50);   // 400 Gb/s between nodes
    // seed 000's "2 seq bs h / TP bytes a layer" and its appendix's "8 seq mbs h / TP" are not this count:
    // at t = 8 they give 1/28 and 1/7 of it (docs/PLAYBOOK_MAP.md, "Where the seeds disagree")
    const double sbh = 8192.0 * c.hidden;
    CHECK(tp_layer_comm_elements(8, 8192, 1, c.hidden) / (2 * sbh / 8) == doctest::Approx(28));
    CHECK(tp_layer_comm_elements(8, 8192, 1, c.hidden) / (8 * sbh / 8) == doctest::Approx(7));
    // seed 000: "TP sends far more than ZeRO-3 (Ψ = L 16h^2)". Per rank and micro-batch of 8192 tokens here,
    // ZeRO-3 over 64 ranks sends more (3Ψ in bf16); TP's bytes grow with s·b, ZeRO-3's do not
    const double zero3 = zero_step_bytes(3, c.n_params(), c.vocab * c.hidden, false, 1, 64, 2);
    CHECK(zero3 > 5 * bytes);
    CHECK(zero3 == doctest::Approx((3.0 * c.n_params() - c.vocab * c.hidden) * 2 * 63 / 64));
    MESSAGE("Llama 3 70B tp 8: " << bytes / GB << " GB a micro-batch of 8192 tokens; ZeRO-3 dp 64: " << zero3 / GB
                                 << " GB");
}

TEST_CASE("seed numbers: checkpoints of 12-14 bytes a parameter (70B: about 1 TB) and sqrt(2 delta M)") {
    const int64_t n = preset("llama3-70b").n_params();
    CHECK(14.0 * (double)n / 1e12 > 0.95);  // "接近 1 TB"
    CHECK(14.0 * (double)n / 1e12 < 1.0);
    // fp32 master 4 + Adam 8 = 12 bytes; + the 16-bit weights 2 = 14
    CHECK(model_state_bytes_bf16_mixed(n).total() - model_state_bytes_bf16_mixed(n).grads == 14 * n);
    const double mtbf = 3.09 * 3600;  // Llama 3's published failures on its cluster
    CHECK(rounded(optimal_checkpoint_interval_s(60, mtbf) / 60, 0) == 19);
    CHECK(rounded(optimal_checkpoint_interval_s(5, mtbf) / 60, 1) == 5.6);
}

TEST_CASE("seed numbers: activations beside model state for Llama 3 8B (bs 1): 2K is not negligible without flash") {
    // seed 000: "short sequences (<= 2K) make activations negligible, 4K+ significant". The playbook's formula in
    // 16-bit, 32 layers, against the 128.5 GB of model state
    const LlamaConfig c = preset("llama3-8b");
    const double state = (double)model_state_bytes_bf16_mixed(c.n_params()).total();
    auto acts = [&](Recompute r, int64_t s) {
        return (double)c.n_layers * (double)playbook_activation_bytes_per_layer(r, s, 1, c.hidden, c.n_heads);
    };
    CHECK(rounded(acts(Recompute::none, 2048) / GB, 1) == 30.6);       // 24% of the model state
    CHECK(acts(Recompute::none, 2048) / state > 0.2);
    CHECK(acts(Recompute::selective, 2048) / state < 0.1);              // flash attention's: 9.1 GB, 7%
    CHECK(rounded(acts(Recompute::none, 4096) / GB, 0) == 104);
    CHECK(acts(Recompute::none, 8192) > 2 * state);                      // 380 GB: the biggest item by far
    MESSAGE("Llama 3 8B activations: 2K " << acts(Recompute::none, 2048) / GB << " GB (flash "
                                          << acts(Recompute::selective, 2048) / GB << "), 4K "
                                          << acts(Recompute::none, 4096) / GB << ", 8K "
                                          << acts(Recompute::none, 8192) / GB << " GB; model state " << state / GB);
}

TEST_CASE("seed numbers: appendix B's 16h^2 a block holds for a GLU MLP of width 4h, not for Llama's") {
    const int64_t h = 4096;
    // MHA (nkv = nh) and a GLU of f = 4h: 4h^2 + 3 h 4h = 16h^2, + the two norms' 2h
    CHECK(llama_layer_param_count(h, 32, 32, 4 * h) == 16 * h * h + 2 * h);
    // no GLU: the playbook's 12h^2 + 13h (GPT: biases, two LayerNorms)
    CHECK(playbook_param_count(h, 0, 1) - 2 * h == 12 * h * h + 13 * h);
    // Llama 3 8B: GQA (8 kv heads) and f = 14336 = 3.5 h: 13.0 h^2 a layer
    const LlamaConfig c = preset("llama3-8b");
    const double per_h2 = (double)llama_layer_param_count(c.hidden, c.n_heads, c.n_kv_heads, c.ffn) / (double)(h * h);
    CHECK(rounded(per_h2, 1) == 13.0);
    // the optimizer's "6h^2 a matrix" is bytes in 2-byte words: fp32 m, v and master are 12 bytes a weight
    const ModelStateBytes one = model_state_bytes_bf16_mixed(1);
    CHECK(one.master + one.optim == 12);
}

}  // TEST_SUITE
