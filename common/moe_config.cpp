// moe_config.cpp — the MoE shape's rules, the MoE presets and a Mixtral config.json's keys (moe_config.hpp).
//
// The published shapes are those of the models' config.json on the Hugging Face hub
// (mistralai/Mixtral-8x7B-v0.1, deepseek-ai/deepseek-moe-16b-base); formulas.hpp's moe_param_count gives
// their published totals (46.7B total / 12.9B active; 16.4B / 2.8B). Test: `make test CH=08`.
#include "moe_config.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core.hpp"
#include "model_config.hpp"

namespace penta {

const char* moe_naming_name(MoeNaming n) { return n == MoeNaming::mixtral ? "mixtral" : "deepseek"; }

void MoeConfig::validate(const LlamaConfig& c) const {
    const char* n = c.name.c_str();
    if (!enabled()) {
        CHECK(experts == 0 && top_k == 0 && expert_ffn == 0 && shared_experts == 0 && first_dense == 0,
              "model %s: experts %lld: a dense model has no top_k, expert_ffn, shared experts or dense layers to set",
              n, (long long)experts);
        return;
    }
    CHECK(experts >= 1 && experts <= 65536, "model %s: experts %lld must be in [1, 65536]", n, (long long)experts);
    CHECK(top_k >= 1 && top_k <= experts, "model %s: top_k %lld must be in [1, experts %lld]", n, (long long)top_k,
          (long long)experts);
    CHECK(expert_ffn >= 1 && expert_ffn <= 2147483647, "model %s: expert_ffn %lld must be in [1, 2147483647]", n,
          (long long)expert_ffn);
    CHECK(shared_experts >= 0 && shared_experts <= experts, "model %s: shared_experts %lld must be in [0, experts %lld]",
          n, (long long)shared_experts, (long long)experts);
    CHECK(first_dense >= 0 && first_dense < c.n_layers,
          "model %s: first_dense %lld must be in [0, n_layers %lld): a MoE model needs a MoE layer", n,
          (long long)first_dense, (long long)c.n_layers);
    // what a config file could say must not wrap the parameter count (formulas.hpp) before anyone sees it
    const double params = (double)c.n_layers * (double)(experts + shared_experts) * 3.0 * (double)c.hidden *
                          (double)expert_ffn;
    CHECK(params < 1e17, "model %s: about %.3g expert parameters is beyond any machine", n, params);
}

namespace {

LlamaConfig moe_model(const char* name, int64_t V, int64_t h, int64_t L, int64_t nh, int64_t nkv, int64_t ffn,
                      int64_t max_seq, double theta, double eps, bool tied, MoeConfig moe) {
    LlamaConfig c;
    c.name = name;
    c.vocab = V, c.hidden = h, c.n_layers = L, c.n_heads = nh, c.n_kv_heads = nkv, c.ffn = ffn;
    c.max_seq = max_seq, c.rope_theta = theta, c.norm_eps = eps, c.tied_embeddings = tied;
    c.moe = moe;
    return c;
}

MoeConfig experts(int64_t E, int64_t k, int64_t f, int64_t shared = 0, int64_t first_dense = 0, bool norm_topk = true,
                  MoeNaming naming = MoeNaming::mixtral) {
    MoeConfig m;
    m.experts = E, m.top_k = k, m.expert_ffn = f, m.shared_experts = shared, m.first_dense = first_dense;
    m.norm_topk = norm_topk, m.naming = naming;
    return m;
}

}  // namespace

const std::vector<LlamaConfig>& moe_presets() {
    static const std::vector<LlamaConfig> all = {
        // name, vocab, hidden, layers, heads, kv heads, ffn (dense layers), max_seq, rope theta, norm eps, tied;
        // experts, top k, expert ffn (, shared, first dense, renormalise, names)
        // 8 experts of the addition task's byte vocabulary: learns it on a CPU in minutes
        moe_model("tiny-moe", 256, 128, 4, 4, 2, 256, 64, 10000.0, 1e-5, true, experts(8, 2, 128)),
        moe_model("mixtral-8x7b", 32000, 4096, 32, 32, 8, 14336, 32768, 1e6, 1e-5, false, experts(8, 2, 14336)),
        // DeepSeekMoE 16B: fine-grained experts (64 of 1408 wide, 6 per token), 2 shared, layer 0 dense
        moe_model("deepseek-moe-16b", 102400, 2048, 28, 16, 16, 10944, 4096, 10000.0, 1e-6, false,
                  experts(64, 6, 1408, 2, 1, false, MoeNaming::deepseek)),
    };
    return all;
}

void check_hf_model_type(const std::string& path, const std::string& type) {
    if (type == "llama" || type == "mixtral") return;
    if (type == "qwen2_moe")
        FAIL("%s: model_type \"qwen2_moe\" does not fit this MoE layer: its attention has q/k/v biases and its shared "
             "expert a sigmoid gate, which ours has not (models: \"llama\", \"mixtral\", or the presets)",
             path.c_str());
    FAIL("%s: model_type %s is not \"llama\" or \"mixtral\"", path.c_str(), type.c_str());
}

void read_hf_moe_config(const nlohmann::json& j, const std::string& path, const std::string& type, LlamaConfig& c) {
    check_hf_model_type(path, type);
    CHECK(type == "mixtral", "%s: model_type %s has no MoE keys to read", path.c_str(), type.c_str());
    auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
    auto integer = [&](const char* key) -> int64_t {
        if (!has(key)) FAIL("%s: missing key \"%s\" (a mixtral config names its experts)", path.c_str(), key);
        if (!j[key].is_number_integer())
            FAIL("%s: key \"%s\" must be an integer, got %s", path.c_str(), key, j[key].dump().c_str());
        return j[key].get<int64_t>();
    };
    c.moe.experts = integer("num_local_experts");
    c.moe.top_k = integer("num_experts_per_tok");
    c.moe.expert_ffn = c.ffn;  // Mixtral's experts are the intermediate_size-wide MLPs
    // what this layer does not model is refused rather than silently trained differently
    // (a sliding_window is load_hf_config's: kept, and held against the run's sequences)
    if (has("router_jitter_noise") && (!j["router_jitter_noise"].is_number() || j["router_jitter_noise"].get<double>() != 0))
        FAIL("%s: router_jitter_noise %s: the router here is deterministic (0 or absent)", path.c_str(),
             j["router_jitter_noise"].dump().c_str());
    if (has("router_aux_loss_coef") && world_rank() == 0)
        std::fprintf(stderr, "note: %s: router_aux_loss_coef %s is not used: chapter 08's balance loss is per sequence, "
                     "set by --moe-aux-coef\n", path.c_str(), j["router_aux_loss_coef"].dump().c_str());
}

}  // namespace penta
