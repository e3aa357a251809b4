// model_config.cpp — Llama presets, validation and the Hugging Face config.json reader (model_config.hpp).
//
// The preset values are those of the models' config.json on the Hugging Face hub (HuggingFaceTB/SmolLM-135M,
// HuggingFaceTB/SmolLM-360M, meta-llama/Llama-3.2-1B, meta-llama/Meta-Llama-3-8B,
// meta-llama/Meta-Llama-3-70B), Llama-3.2-1B with its "llama3" rope_scaling.
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='*config*'`.
#include "model_config.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "core.hpp"
#include "json_strict.hpp"
#include "formulas.hpp"

namespace penta {

int64_t LlamaConfig::n_params() const {
    if (moe.enabled()) return moe_param_count(*this).total;
    return llama_param_count(vocab, hidden, n_layers, n_heads, n_kv_heads, ffn, tied_embeddings, head_dim());
}

int64_t LlamaConfig::n_active_params() const { return moe.enabled() ? moe_param_count(*this).active : n_params(); }

void LlamaConfig::validate() const {
    const char* n = name.c_str();
    CHECK(vocab > 0, "model %s: vocab %lld must be positive", n, (long long)vocab);
    CHECK(hidden > 0, "model %s: hidden %lld must be positive", n, (long long)hidden);
    CHECK(n_layers > 0, "model %s: n_layers %lld must be positive", n, (long long)n_layers);
    CHECK(n_heads > 0, "model %s: n_heads %lld must be positive", n, (long long)n_heads);
    CHECK(n_kv_heads > 0, "model %s: n_kv_heads %lld must be positive", n, (long long)n_kv_heads);
    CHECK(ffn > 0, "model %s: ffn %lld must be positive", n, (long long)ffn);
    CHECK(max_seq > 0, "model %s: max_seq %lld must be positive", n, (long long)max_seq);
    CHECK(sliding_window >= 0, "model %s: sliding_window %lld must be >= 0 (0: none)", n, (long long)sliding_window);
    CHECK(head_size > 0 || hidden % n_heads == 0, "model %s: hidden %lld must be a multiple of n_heads %lld", n,
          (long long)hidden, (long long)n_heads);
    CHECK(head_size >= 0 && head_size <= 65536, "model %s: head_dim %lld must be in [1, 65536] (0: hidden / n_heads)",
          n, (long long)head_size);
    CHECK(n_heads % n_kv_heads == 0, "model %s: n_heads %lld must be a multiple of n_kv_heads %lld (GQA)", n,
          (long long)n_heads, (long long)n_kv_heads);
    CHECK(head_dim() % 2 == 0, "model %s: head_dim %lld must be even for RoPE", n, (long long)head_dim());
    CHECK(std::isfinite(rope_theta) && rope_theta > 0, "model %s: rope_theta %g must be finite and positive", n,
          rope_theta);
    if (rope_scaling.type == RopeScaling::Type::llama3) {
        const RopeScaling& r = rope_scaling;
        CHECK(std::isfinite(r.factor) && r.factor >= 1, "model %s: rope_scaling factor %g must be finite and >= 1", n,
              r.factor);
        CHECK(std::isfinite(r.low_freq_factor) && std::isfinite(r.high_freq_factor) && r.low_freq_factor > 0 &&
                  r.high_freq_factor > r.low_freq_factor,
              "model %s: rope_scaling needs 0 < low_freq_factor %g < high_freq_factor %g", n, r.low_freq_factor,
              r.high_freq_factor);
        CHECK(r.original_max_position > 0, "model %s: rope_scaling original_max_position_embeddings %lld must be "
              "positive", n, (long long)r.original_max_position);
    }
    CHECK(std::isfinite(norm_eps) && norm_eps > 0, "model %s: norm_eps %g must be finite and positive", n, norm_eps);
    // sizes the kernels index with 32-bit ints, and a parameter count whose byte sizes fit int64 (a config
    // from a file could say anything: the product must not wrap before the memory check sees it)
    for (auto [what, v] : {std::pair<const char*, int64_t>{"vocab", vocab}, {"hidden", hidden}, {"ffn", ffn},
                           {"n_layers", n_layers}, {"max_seq", max_seq}})
        CHECK(v <= std::numeric_limits<int32_t>::max(), "model %s: %s %lld must be <= 2147483647", n, what, (long long)v);
    const double params = (double)vocab * hidden * 2 + (double)n_layers * (4.0 * hidden * hidden + 3.0 * hidden * ffn);
    CHECK(params < 1e17, "model %s: about %.3g parameters is beyond any machine (and their bytes beyond int64)", n,
          params);
    moe.validate(*this);
}

namespace {

LlamaConfig make(const char* name, int64_t V, int64_t h, int64_t L, int64_t nh, int64_t nkv, int64_t f,
                 int64_t max_seq, double theta, double eps, bool tied) {
    LlamaConfig c;
    c.name = name;
    c.vocab = V, c.hidden = h, c.n_layers = L, c.n_heads = nh, c.n_kv_heads = nkv, c.ffn = f;
    c.max_seq = max_seq, c.rope_theta = theta, c.norm_eps = eps, c.tied_embeddings = tied;
    return c;
}

// Llama 3.1 / 3.2's rope_scaling: {"rope_type": "llama3", "factor": F, "low_freq_factor": 1,
// "high_freq_factor": 4, "original_max_position_embeddings": 8192}
LlamaConfig llama3_scaled(LlamaConfig c, double factor) {
    c.rope_scaling = RopeScaling{RopeScaling::Type::llama3, factor, 1.0, 4.0, 8192};
    return c;
}

const std::vector<LlamaConfig>& presets() {
    static const std::vector<LlamaConfig> all = {
        // name, vocab, hidden, layers, heads, kv heads, ffn, max_seq, rope theta, norm eps, tied
        make("tiny", 64, 32, 2, 4, 2, 64, 32, 10000.0, 1e-5, false),
        // a few million parameters over the byte tokenizer's 256 symbols: trains on a laptop CPU in minutes
        make("small", 256, 256, 4, 8, 4, 704, 256, 10000.0, 1e-5, true),
        make("smollm-135m", 49152, 576, 30, 9, 3, 1536, 2048, 10000.0, 1e-5, true),
        make("smollm-360m", 49152, 960, 32, 15, 5, 2560, 2048, 10000.0, 1e-5, true),
        llama3_scaled(make("llama3.2-1b", 128256, 2048, 16, 32, 8, 8192, 131072, 500000.0, 1e-5, true), 32),
        make("llama3-8b", 128256, 4096, 32, 32, 8, 14336, 8192, 500000.0, 1e-5, false),
        make("llama3-70b", 128256, 8192, 80, 64, 8, 28672, 8192, 500000.0, 1e-5, false),
    };
    return all;
}

}  // namespace

// the dense presets, then the MoE ones (moe_config.cpp)
static std::vector<LlamaConfig> all_presets() {
    std::vector<LlamaConfig> all = presets();
    all.insert(all.end(), moe_presets().begin(), moe_presets().end());
    return all;
}

std::vector<std::string> preset_names() {
    std::vector<std::string> names;
    for (const auto& c : all_presets()) names.push_back(c.name);
    return names;
}

LlamaConfig preset(const std::string& name) {
    std::string valid;
    for (const auto& c : all_presets()) {
        if (c.name == name) return c;
        valid += (valid.empty() ? "" : ", ") + c.name;
    }
    FAIL("unknown model preset '%s' (valid: %s)", name.c_str(), valid.c_str());
}

namespace {

// rope_scaling: null, {"rope_type": "default"} or a llama3 block (older configs say "type")
void read_rope_scaling(const nlohmann::json& j, const std::string& path, LlamaConfig& c) {
    if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return;
    const nlohmann::json& r = j["rope_scaling"];
    if (!r.is_object()) FAIL("%s: key \"rope_scaling\" must be an object or null, got %s", path.c_str(), r.dump().c_str());
    const char* type_key = r.contains("rope_type") ? "rope_type" : "type";
    const std::string type = r.contains(type_key) && r[type_key].is_string() ? r[type_key].get<std::string>() : "";
    if (type == "default") return;
    if (type != "llama3")
        FAIL("%s: rope_scaling %s = %s is not implemented (only \"llama3\" and \"default\")", path.c_str(), type_key,
             r.contains(type_key) ? r[type_key].dump().c_str() : "(missing)");
    auto number = [&](const char* key) -> double {
        if (!r.contains(key) || !r[key].is_number())
            FAIL("%s: rope_scaling of type llama3 needs the number \"%s\", got %s", path.c_str(), key,
                 r.contains(key) ? r[key].dump().c_str() : "nothing");
        return r[key].get<double>();
    };
    RopeScaling& s = c.rope_scaling;
    s.type = RopeScaling::Type::llama3;
    s.factor = number("factor");
    s.low_freq_factor = number("low_freq_factor");
    s.high_freq_factor = number("high_freq_factor");
    const double orig = number("original_max_position_embeddings");
    if (orig != std::floor(orig) || orig < 1 || orig > 1e12)
        FAIL("%s: rope_scaling original_max_position_embeddings %g must be a positive integer", path.c_str(), orig);
    s.original_max_position = (int64_t)orig;
}

// Keys with which transformers builds a different model than ours: refused, naming the key and the value,
// rather than silently training something else.
void refuse_unimplemented(const nlohmann::json& j, const std::string& path) {
    auto is = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
    for (const char* key : {"attention_bias", "mlp_bias"})
        if (is(key) && j[key] != false)
            FAIL("%s: %s = %s is not implemented (our linears have no bias)", path.c_str(), key, j[key].dump().c_str());
    // transformers' ACT2FN maps "swish" to the same nn.SiLU as "silu"
    if (is("hidden_act") && j["hidden_act"] != "silu" && j["hidden_act"] != "swish")
        FAIL("%s: hidden_act = %s is not implemented (the MLP is SwiGLU: \"silu\", also called \"swish\")",
             path.c_str(), j["hidden_act"].dump().c_str());
    if (is("attention_dropout") && !(j["attention_dropout"].is_number() && j["attention_dropout"].get<double>() == 0))
        FAIL("%s: attention_dropout = %s is not implemented (no dropout)", path.c_str(),
             j["attention_dropout"].dump().c_str());
}

// sliding_window W (Mistral, Mixtral): each token attends to the W tokens up to itself, which for a sequence of
// at most W tokens is every earlier one, our attention. Kept, for resolve_model to hold the run's sequences to
// it (a longer one is refused there, naming the key); null, absent or use_sliding_window false: none.
void read_sliding_window(const nlohmann::json& j, const std::string& path, LlamaConfig& c) {
    const bool window_off = j.contains("use_sliding_window") && j["use_sliding_window"] == false;
    if (!j.contains("sliding_window") || j["sliding_window"].is_null() || window_off) return;
    const nlohmann::json& w = j["sliding_window"];
    if (!w.is_number_integer() || w.get<int64_t>() < 1)
        FAIL("%s: sliding_window = %s must be a number of tokens >= 1 or null", path.c_str(), w.dump().c_str());
    c.sliding_window = w.get<int64_t>();
}

// transformers' defaults of the keys a config may leave out, per model_type (LlamaConfig, MixtralConfig 4.46)
struct HfDefaults {
    int64_t max_position;
    double rope_theta, rms_norm_eps;
    int64_t kv_heads;  // 0: as many as the query heads (plain multi-head attention)
};
HfDefaults hf_defaults(const std::string& type) {
    if (type == "mixtral") return {131072, 1e6, 1e-5, 8};
    return {2048, 10000.0, 1e-6, 0};
}

}  // namespace

LlamaConfig load_hf_config(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) FAIL("Hugging Face config '%s' is a directory, not a file", path.c_str());
    std::ifstream in(path, std::ios::binary);
    if (!in) FAIL("cannot open Hugging Face config '%s': %s", path.c_str(), std::strerror(errno));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) FAIL("%s: reading failed: %s", path.c_str(), std::strerror(errno));
    // bounded nesting: a value nested a million deep parses, then crashes the dump() of an error message
    const nlohmann::json j = parse_json_bounded(text.data(), text.data() + text.size(), path);
    if (!j.is_object()) FAIL("%s: expected a JSON object at the top level", path.c_str());
    auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
    auto integer = [&](const char* key) -> int64_t {
        if (!has(key)) FAIL("%s: missing key \"%s\"", path.c_str(), key);
        if (!j[key].is_number_integer())
            FAIL("%s: key \"%s\" must be an integer, got %s", path.c_str(), key, j[key].dump().c_str());
        return j[key].get<int64_t>();
    };
    auto number = [&](const char* key, double dflt) -> double {
        if (!has(key)) return dflt;
        if (!j[key].is_number())
            FAIL("%s: key \"%s\" must be a number, got %s", path.c_str(), key, j[key].dump().c_str());
        return j[key].get<double>();
    };
    const std::string type = !has("model_type") ? "llama"
                             : j["model_type"].is_string() ? j["model_type"].get<std::string>() : j["model_type"].dump();
    check_hf_model_type(path, type);  // "llama", or a mixture of experts (moe_config.hpp)

    LlamaConfig c;
    c.name = path;
    c.hidden = integer("hidden_size");
    c.n_layers = integer("num_hidden_layers");
    c.n_heads = integer("num_attention_heads");
    // absent in older configs: Hugging Face then uses plain multi-head attention
    // defaults are those of transformers' config class of the model_type: what it builds from the same file
    const HfDefaults d = hf_defaults(type);
    c.n_kv_heads = has("num_key_value_heads") ? integer("num_key_value_heads") : d.kv_heads ? d.kv_heads : c.n_heads;
    c.ffn = integer("intermediate_size");
    c.vocab = integer("vocab_size");
    c.max_seq = has("max_position_embeddings") ? integer("max_position_embeddings") : d.max_position;
    c.rope_theta = number("rope_theta", d.rope_theta);
    c.norm_eps = number("rms_norm_eps", d.rms_norm_eps);
    if (has("tie_word_embeddings")) {
        if (!j["tie_word_embeddings"].is_boolean())
            FAIL("%s: key \"tie_word_embeddings\" must be true or false", path.c_str());
        c.tied_embeddings = j["tie_word_embeddings"].get<bool>();
    }
    if (has("head_dim")) c.head_size = integer("head_dim");  // equal to hidden / heads in most Llamas
    if (type != "llama") read_hf_moe_config(j, path, type, c);
    read_rope_scaling(j, path, c);
    if (type != "llama") read_sliding_window(j, path, c);  // transformers' Llama ignores the key: so do we
    refuse_unimplemented(j, path);
    try {
        c.validate();
    } catch (const Error& e) {
        FAIL("%s: invalid config: %s", path.c_str(), e.what());
    }
    return c;
}

const char* recompute_name(Recompute r) {
    switch (r) {
        case Recompute::none: return "none";
        case Recompute::selective: return "selective";
        case Recompute::full: return "full";
        case Recompute::offload: return "offload";
    }
    return "?";
}

const char* attention_kernel_name(AttentionKernel k) {
    return k == AttentionKernel::naive ? "naive" : "flash";
}

Recompute parse_recompute(const std::string& s) {
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full, Recompute::offload})
        if (s == recompute_name(r)) return r;
    FAIL("recompute '%s' is not one of none|selective|full|offload", s.c_str());
}

AttentionKernel parse_attention_kernel(const std::string& s) {
    for (AttentionKernel k : {AttentionKernel::naive, AttentionKernel::flash})
        if (s == attention_kernel_name(k)) return k;
    FAIL("attention kernel '%s' is not one of naive|flash", s.c_str());
}

}  // namespace penta
