// rope.hpp — RoPE's inverse frequencies, computed once per model as Hugging Face transformers computes
// them: inv_freq_i = 1 / theta^(2i/hd) in f32 and, for a "llama3" rope_scaling (Llama 3.1 / 3.2), the
// long wavelengths (> original context / low_freq_factor) divided by `factor`, the short ones
// (< original context / high_freq_factor) kept, and those between interpolated smoothly. The model holds
// the table as a tensor on its device and the rope op reads it (ops.hpp), so no kernel recomputes it.
//
// Playbook: "Context parallelism" (RoPE makes attention depend on relative positions only); Llama 3.1's
// "rope_scaling" (transformers' _compute_llama3_parameters). Test: tests/01_single_gpu/test_hf_checkpoint.cpp
// compares the table bit for bit with transformers' (`build/bin/tests_01 -ts='ch01 np1' -tc='RoPE*'`).
#pragma once
#include <vector>

#include "model_config.hpp"
#include "tensor.hpp"

namespace penta {

// (head_dim / 2) f32 values, bit for bit transformers' LlamaRotaryEmbedding.inv_freq
std::vector<float> rope_inv_freq(const LlamaConfig& c);
// the same, as a (head_dim / 2) tensor on `device`; Tag::workspace, so Tag::params counts exactly the
// weights (4N in fp32, as the memory tables and tests expect)
Tensor rope_inv_freq_tensor(const LlamaConfig& c, Device device);

}  // namespace penta
