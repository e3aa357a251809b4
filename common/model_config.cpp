// model_config.cpp — Llama presets, validation and the Hugging Face config.json reader (model_config.hpp).
//
// The preset values are those of the models' config.json on the Hugging Face hub (HuggingFaceTB/SmolLM-135M,
// HuggingFaceTB/SmolLM-360M, meta-llama/Llama-3.2-1B, meta-llama/Meta-Llama-3-8B,
// meta-llama/Meta-Llama-3-70B). Llama-3.2-1B's "llama3" rope_scaling is not modelled (see load_hf_config).
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='*config*'`.
#include "model_config.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core.hpp"
#include "formulas.hpp"

namespace penta {

int64_t LlamaConfig::n_params() const {
    if (moe.enabled()) return moe_param_count(*this).total;
    return llama_param_count(vocab, hidden, n_layers, n_heads, n_kv_heads, ffn, tied_embeddings);
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
    CHECK(hidden % n_heads == 0, "model %s: hidden %lld must be a multiple of n_heads %lld", n,
          (long long)hidden, (long long)n_heads);
    CHECK(n_heads % n_kv_heads == 0, "model %s: n_heads %lld must be a multiple of n_kv_heads %lld (GQA)", n,
          (long long)n_heads, (long long)n_kv_heads);
    CHECK(head_dim() % 2 == 0, "model %s: head_dim %lld (hidden / n_heads) must be even for RoPE", n,
          (long long)head_dim());
    CHECK(std::isfinite(rope_theta) && rope_theta > 0, "model %s: rope_theta %g must be finite and positive", n,
          rope_theta);
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

const std::vector<LlamaConfig>& presets() {
    static const std::vector<LlamaConfig> all = {
        // name, vocab, hidden, layers, heads, kv heads, ffn, max_seq, rope theta, norm eps, tied
        make("tiny", 64, 32, 2, 4, 2, 64, 32, 10000.0, 1e-5, false),
        // a few million parameters over the byte tokenizer's 256 symbols: trains on a laptop CPU in minutes
        make("small", 256, 256, 4, 8, 4, 704, 256, 10000.0, 1e-5, true),
        make("smollm-135m", 49152, 576, 30, 9, 3, 1536, 2048, 10000.0, 1e-5, true),
        make("smollm-360m", 49152, 960, 32, 15, 5, 2560, 2048, 10000.0, 1e-5, true),
        make("llama3.2-1b", 128256, 2048, 16, 32, 8, 8192, 131072, 500000.0, 1e-5, true),
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

LlamaConfig load_hf_config(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) FAIL("Hugging Face config '%s' is a directory, not a file", path.c_str());
    std::ifstream in(path);
    if (!in) FAIL("cannot open Hugging Face config '%s': %s", path.c_str(), std::strerror(errno));
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const std::exception& e) {  // a JSON error, or the stream's (a read error)
        FAIL("%s: not valid JSON: %s", path.c_str(), e.what());
    }
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
    c.n_kv_heads = has("num_key_value_heads") ? integer("num_key_value_heads") : c.n_heads;
    c.ffn = integer("intermediate_size");
    c.vocab = integer("vocab_size");
    c.max_seq = integer("max_position_embeddings");
    // defaults are those of transformers' LlamaConfig
    c.rope_theta = number("rope_theta", 10000.0);
    c.norm_eps = number("rms_norm_eps", 1e-6);
    if (has("tie_word_embeddings")) {
        if (!j["tie_word_embeddings"].is_boolean())
            FAIL("%s: key \"tie_word_embeddings\" must be true or false", path.c_str());
        c.tied_embeddings = j["tie_word_embeddings"].get<bool>();
    }
    if (has("head_dim") && c.n_heads > 0 && integer("head_dim") != c.hidden / c.n_heads)
        FAIL("%s: key \"head_dim\" %lld must equal hidden_size / num_attention_heads = %lld", path.c_str(),
             (long long)integer("head_dim"), (long long)(c.hidden / c.n_heads));
    if (type != "llama") read_hf_moe_config(j, path, type, c);
    if (has("rope_scaling") && world_rank() == 0)
        std::fprintf(stderr, "note: %s: rope_scaling %s is ignored (plain RoPE with theta %g)\n",
                     path.c_str(), j["rope_scaling"].dump().c_str(), c.rope_theta);
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
    }
    return "?";
}

const char* attention_kernel_name(AttentionKernel k) {
    return k == AttentionKernel::naive ? "naive" : "flash";
}

Recompute parse_recompute(const std::string& s) {
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
        if (s == recompute_name(r)) return r;
    FAIL("recompute '%s' is not one of none|selective|full", s.c_str());
}

AttentionKernel parse_attention_kernel(const std::string& s) {
    for (AttentionKernel k : {AttentionKernel::naive, AttentionKernel::flash})
        if (s == attention_kernel_name(k)) return k;
    FAIL("attention kernel '%s' is not one of naive|flash", s.c_str());
}

}  // namespace penta
