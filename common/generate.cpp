// generate.cpp — the sampling loop over Model::decode and its KV cache (generate.hpp).
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='*generat*'`.
#include "generate.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace penta {

int32_t sample_token(const std::vector<float>& logits, const GenerateOptions& o, int64_t step) {
    const int64_t V = (int64_t)logits.size();
    if (o.temperature == 0) return (int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());
    std::vector<int32_t> ids(V);
    std::iota(ids.begin(), ids.end(), 0);
    const int64_t k = o.top_k > 0 ? std::min(o.top_k, V) : V;
    // the k largest, in a fixed order (ties: the smaller id), so every rank keeps the same ones
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
        return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    std::vector<double> p(k);
    const double top = logits[ids[0]];
    double sum = 0;
    for (int64_t i = 0; i < k; i++) sum += p[i] = std::exp((logits[ids[i]] - top) / o.temperature);
    const double u = rng_uniform(o.seed, name_stream("generate"), (uint64_t)step) * sum;
    double acc = 0;
    for (int64_t i = 0; i < k; i++)
        if ((acc += p[i]) >= u) return ids[i];
    return ids[k - 1];
}

std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                              const std::function<Tensor(const Tensor&)>& full_logits,
                              const std::function<void(int32_t)>& on_token) {
    CHECK(!prompt.empty(), "generate: the prompt has no token");
    CHECK(o.max_new >= 1, "generate: max_new %lld must be >= 1", (long long)o.max_new);
    CHECK(o.temperature >= 0 && std::isfinite(o.temperature), "generate: temperature %g must be >= 0", o.temperature);
    const int64_t max_seq = model.config().max_seq, n = (int64_t)prompt.size();
    CHECK(n < max_seq, "generate: the prompt's %lld tokens leave no room below the model's max_seq %lld", (long long)n,
          (long long)max_seq);
    for (int32_t id : prompt)
        CHECK(id >= 0 && id < model.config().vocab, "generate: prompt token %d is outside the vocabulary of %lld", id,
              (long long)model.config().vocab);
    const int64_t capacity = std::min(max_seq, n + o.max_new);
    KVCache cache = model.kv_cache(capacity);
    std::vector<int32_t> out;
    Tensor tokens = Tensor::from_host_i32(prompt, {n}, model.device());  // (n) the prompt, all at once
    for (int64_t step = 0; cache.len() + tokens.numel() <= capacity; step++) {
        Tensor logits = model.decode(tokens, cache);  // (n, V) or (n, V/tp)
        if (full_logits) logits = full_logits(logits);
        const int64_t V = logits.size(1);
        const std::vector<float> all = logits.to_host();
        const std::vector<float> last(all.end() - V, all.end());  // the next token's logits
        const int32_t next = sample_token(last, o, step);
        if (std::find(o.stop.begin(), o.stop.end(), next) != o.stop.end()) break;
        out.push_back(next);
        if (on_token) on_token(next);
        if ((int64_t)out.size() >= o.max_new) break;
        tokens = Tensor::from_host_i32({next}, {1}, model.device());  // (1) only the new token
    }
    return out;
}

}  // namespace penta
