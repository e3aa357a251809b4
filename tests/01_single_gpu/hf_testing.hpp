// hf_testing.hpp — what the tests of Hugging Face checkpoints share (tests/01_single_gpu/test_hf_checkpoint.cpp,
// tests/04_tensor_parallel/test_hf_tp.cpp): a Python that imports torch, transformers, safetensors and
// tokenizers (installed by scripts/install_hf_python.sh when missing), random LlamaForCausalLMs written by
// tools/hf_reference.py, and transformers' logits, loss and gradients for them.
// Run: `make test CH=01`, `make test CH=04`.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "../../common/model.hpp"
#include "../testing.hpp"

namespace penta::hf_testing {

// a path in /tmp for this test process's files: "/tmp/penta_hf_<pid>_<what>"
std::string scratch(const std::string& what);

// /usr/bin/python3 once it imports torch, transformers, safetensors and tokenizers (running
// scripts/install_hf_python.sh once if it does not); "" with *why set when they cannot be had
std::string python_with_hf(std::string* why);

// the random model tools/hf_reference.py makes (its `make` options)
struct HfSpec {
    bool tied = false, llama3 = false;
    int shard_kb = 0;  // > 0: save_pretrained cuts the weights into files of about this size (and an index)
    std::string dtype = "float32";
    int head_dim = 0;  // 0: hidden / heads
    int layers = 4;
    int experts = 0;   // > 0: a MixtralForCausalLM of that many experts, 2 per token
    std::string str() const;  // "tied, llama3, sharded 20KB, bfloat16"
    std::string args() const;
};

// runs `python tools/hf_reference.py make dir <spec>`; false (after printing why) when it failed
bool make_hf_model(const std::string& python, const std::string& dir, const HfSpec& spec);

// DIR/reference.safetensors: transformers' forward and backward on its batch
struct HfReference {
    int64_t B = 0, T = 0;
    std::vector<int32_t> tokens, targets;  // (B T); ignored targets are -1
    std::vector<float> logits;             // (B T, V)
    double loss = 0;                       // mean over the counted targets
    std::vector<float> inv_freq;           // transformers' rotary table
    std::map<std::string, std::vector<float>> grads;  // by HF name
    int64_t counted() const;               // targets that count
};
HfReference read_hf_reference(const std::string& dir);

// our logits on a batch as tools/hf_reference.py check reads them: tokens (B, T) I32, logits (B T, V) F32
void write_logits(const std::string& path, const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                  const std::vector<float>& logits);
// runs `hf_reference.py check dir ours`: transformers loads dir and compares its logits with ours
bool transformers_agrees(const std::string& python, const std::string& dir, const std::string& ours);

// |got - want| <= rtol·|want| + rtol·max|want| for every element (the tensor's scale: float32 sums in
// another order than float64's differ in their last bits)
void check_close_scaled(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                        const std::string& what);

}  // namespace penta::hf_testing
