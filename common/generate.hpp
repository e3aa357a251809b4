// generate.hpp — text generation with a KV cache: the prompt goes through the model once (its keys and values
// fill the cache), then one token at a time, each new token attending to every cached one, so a step costs
// one token's forward instead of the whole sequence's.
//
//   greedy (temperature 0): the most likely next token; otherwise softmax(logits / temperature) over the
//   top_k most likely (0: all), sampled with the counter RNG keyed by (seed, step): every rank draws the same
//   token, so data- and tensor-parallel ranks generate in lockstep.
//
// Playbook: "First steps: training on one GPU" (what the trained model does: the addition task's sums).
// Run: `build/bin/01_single_gpu --generate "24+71="` (`--help` lists the sampling flags).
// Test: tests/01_single_gpu/test_generate.cpp (`build/bin/tests_01 -ts='ch01 np1' -tc='*generat*'`).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model.hpp"

namespace penta {

struct GenerateOptions {
    int64_t max_new = 64;     // tokens to generate at most
    float temperature = 0;    // 0: greedy
    int64_t top_k = 0;        // sample among the k most likely (0: all)
    uint64_t seed = 0;
    std::vector<int32_t> stop;  // ids that end the generation (end of text); not appended
};

// The next token from one row of logits (V) by the options' rule; step keys the random draw.
int32_t sample_token(const std::vector<float>& logits, const GenerateOptions& o, int64_t step);

// Generates after `prompt` (its ids, at least one). full_logits: as in evaluate (train_loop.hpp), the whole
// vocabulary's logits from this rank's (TP gathers them); empty when they are whole. on_token hears each
// new token as it comes (to print it). Returns the generated ids. Every rank of the model's groups calls it.
std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                              const std::function<Tensor(const Tensor&)>& full_logits = {},
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace penta
