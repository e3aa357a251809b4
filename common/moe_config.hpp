// moe_config.hpp — the mixture-of-experts shape of a model (LlamaConfig::moe): how many experts, how many a
// token goes to, their width, shared experts, which layers stay dense, how the router scores; the MoE presets
// (a tiny one that learns the addition task on CPU, Mixtral-8x7B and DeepSeekMoE-16B with their published
// shapes) and the keys of a Hugging Face Mixtral config.json.
//
// A MoE layer replaces the dense SwiGLU MLP by E SwiGLU experts of width expert_ffn and a router (E, h): each
// token goes to its top_k experts and their outputs are summed with the router's weights (chapter 08,
// 08_expert_parallel/moe_layer.hpp). Only k of the E experts compute for a token, so a MoE model has many
// parameters (total) and few per token (active): formulas.hpp counts both.
//
// Playbook: "Expert parallelism". Test: `make test CH=08` (tests/08_expert_parallel/test_moe_config.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace penta {

struct LlamaConfig;

// Where a family keeps its MoE tensors (the Hugging Face names, so checkpoints load by name):
//   mixtral   block_sparse_moe.gate.weight (E, h); block_sparse_moe.experts.<j>.w1 (gate), w3 (up), w2 (down)
//   deepseek  mlp.gate.weight (E, h); mlp.experts.<j>.{gate,up,down}_proj; mlp.shared_experts.{gate,up,down}_proj
enum class MoeNaming : uint8_t { mixtral, deepseek };

struct MoeConfig {
    int64_t experts = 0;         // routed experts E per MoE layer; 0: a dense model
    int64_t top_k = 0;           // experts each token is sent to
    int64_t expert_ffn = 0;      // SwiGLU width of one expert
    int64_t shared_experts = 0;  // always-on experts (DeepSeekMoE): one SwiGLU of width shared_experts × expert_ffn
    int64_t first_dense = 0;     // layers [0, first_dense) keep the dense MLP of width ffn (DeepSeekMoE: 1)
    bool sigmoid_scores = false; // DeepSeek-V3: sigmoid scores instead of Mixtral's softmax over the experts
    bool norm_topk = true;       // the chosen k weights renormalised to sum 1 (Mixtral); DeepSeekMoE keeps the scores
    MoeNaming naming = MoeNaming::mixtral;

    bool enabled() const { return experts > 0; }
    bool moe_layer(int64_t layer) const { return enabled() && layer >= first_dense; }
    // throws naming the model, the field and the rule (top_k in [1, experts], ...); nothing for a dense model
    void validate(const LlamaConfig& model) const;
};

const char* moe_naming_name(MoeNaming n);

// "tiny-moe", "mixtral-8x7b", "deepseek-moe-16b"
const std::vector<LlamaConfig>& moe_presets();

// The model_type of a Hugging Face config.json: "llama" or "mixtral"; any other is refused, naming the file
// and why ("qwen2_moe": its attention has q/k/v biases and its shared expert a gate, which this layer has not).
void check_hf_model_type(const std::string& path, const std::string& model_type);
// The MoE keys of a "mixtral" config.json (num_local_experts, num_experts_per_tok; its experts are
// intermediate_size wide), into c, which holds the Llama keys already read. Errors name the file and the key.
void read_hf_moe_config(const nlohmann::json& j, const std::string& path, const std::string& model_type,
                        LlamaConfig& c);

}  // namespace penta
