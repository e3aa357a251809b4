// model_config.hpp — the Llama architecture as numbers: LlamaConfig, the presets (tiny for tests, small
// for the CPU demo, SmolLM and Llama 3 with their Hugging Face values) and a Hugging Face config.json
// reader. Also the two switches of chapter 01's memory story: activation recomputation and the attention
// kernel.
//
// Playbook: "First steps: training on one GPU" (memory usage, activation recomputation).
// Test: `build/bin/tests_01 -ts='ch01 np1'` (tests/01_single_gpu/test_model.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "moe_config.hpp"

namespace penta {

// rope_scaling of a Hugging Face config: "llama3" (Llama 3.1 / 3.2) divides the low frequencies by
// `factor`, keeps the high ones and interpolates between (rope.hpp computes the table as transformers does).
struct RopeScaling {
    enum class Type : uint8_t { none, llama3 } type = Type::none;
    double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
    int64_t original_max_position = 0;  // original_max_position_embeddings
};

struct LlamaConfig {
    std::string name;
    int64_t vocab = 0;
    int64_t hidden = 0;      // h
    int64_t n_layers = 0;    // L
    int64_t n_heads = 0;     // query heads
    int64_t n_kv_heads = 0;  // key/value heads (GQA: several query heads share one)
    int64_t ffn = 0;         // SwiGLU intermediate size f
    int64_t max_seq = 0;     // longest sequence the model accepts
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;      // Llama 3.1+'s frequency rescaling for long contexts (none: plain RoPE)
    double norm_eps = 1e-5;
    bool tied_embeddings = false;  // lm_head reuses the embedding table
    int64_t head_size = 0;         // HF's head_dim where it differs from hidden / n_heads; 0: hidden / n_heads
    MoeConfig moe;                 // a mixture of experts in place of the dense MLP (moe_config.hpp); dense by default
    // a config.json's sliding_window W (Mistral, Mixtral; 0: none): a token attends to the last W tokens only, all
    // of them while a sequence has at most W, so runs whose sequences fit are ours exactly (resolve_model checks)
    int64_t sliding_window = 0;

    int64_t head_dim() const { return head_size > 0 ? head_size : hidden / n_heads; }
    int64_t n_params() const;  // exact count of OUR Llama (formulas.hpp: llama_param_count; MoE: moe_param_count)
    int64_t n_active_params() const;  // what one token computes with: n_params() unless MoE (its k experts only)
    // Throws naming the field, the value and the rule that fails (e.g. "n_heads 6 % n_kv_heads 4 != 0").
    void validate() const;
};

// "tiny", "small", "smollm-135m", "smollm-360m", "llama3.2-1b", "llama3-8b", "llama3-70b", and the MoE
// presets of moe_config.hpp ("tiny-moe", "mixtral-8x7b", "deepseek-moe-16b").
// An unknown name throws, listing the valid ones.
LlamaConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// A Mixtral config.json (model_type "mixtral") also gives its MoE keys (moe_config.hpp: read_hf_moe_config).
// Reads a Hugging Face Llama config.json (hidden_size, num_hidden_layers, ...). Errors name the file and
// the key. A key left out takes transformers' default for the model_type (max_position_embeddings 2048 for a
// Llama, 131072 for a Mixtral, ...). Keys that would make the model differ from ours are refused naming the key
// and the value: attention_bias / mlp_bias true, hidden_act other than silu (or its other name, swish),
// attention_dropout > 0, a rope_scaling type other than llama3; a sliding_window is kept in the config, and a
// run whose sequences are longer than it is refused (resolve_model, train_loop.hpp).
LlamaConfig load_hf_config(const std::string& path);

// What the forward pass keeps for backward (playbook: "Activation recomputation"):
//   none      everything the backward reads (with the naive kernel: the (B, nh, T, T) probabilities too)
//   selective drop the attention probabilities; the backward recomputes them from q, k and the lse
//   full      keep only each block's input; the backward reruns the block's forward first
// offload: everything none keeps, moved to host memory between a layer's forward and backward (offload.hpp)
enum class Recompute : uint8_t { none, selective, full, offload };
// naive materialises the (T, T) probabilities; flash (tiled, online softmax) never does
enum class AttentionKernel : uint8_t { naive, flash };

const char* recompute_name(Recompute r);
const char* attention_kernel_name(AttentionKernel k);
Recompute parse_recompute(const std::string& s);               // throws listing none|selective|full|offload
AttentionKernel parse_attention_kernel(const std::string& s);  // throws listing naive|flash

}  // namespace penta
