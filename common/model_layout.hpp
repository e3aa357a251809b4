// model_layout.hpp — where every parameter lives in the ONE flat buffer, for the full model or for a
// tensor-parallel shard / pipeline stage of it, and the initialisation that makes a shard equal to the
// slice of the full tensor.
//
// Layer-major units: unit 0 = embedding, unit 1 + i = decoder layer i, unit L + 1 = head (final norm and,
// untied, lm_head). Each unit is one contiguous range of the flat buffer, so a DP bucket is a run of units
// and a ZeRO shard a range of elements (DESIGN §4). Units a pipeline stage does not hold are empty.
// Tensor parallelism (Megatron): q/k/v/gate/up are column-parallel (rows split: heads/tp, kv_heads/tp,
// ffn/tp), wo/w_down row-parallel (columns split), embedding and lm_head vocab-parallel (rows split, vocab
// padded up to a multiple of tp; padding rows are zero), norms replicated.
//
// Playbook: "Tensor parallelism", "Pipeline parallelism", "ZeRO" (flat buffers), DESIGN §5 (init).
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='*layout*'`.
#pragma once
#include <string>
#include <vector>

#include "model_config.hpp"
#include "tensor.hpp"

namespace penta {

// The layers [layer_begin, layer_end) a pipeline stage builds; layer_end = -1 means the last layer.
struct PipelineSlice {
    int64_t layer_begin = 0;
    int64_t layer_end = -1;
    bool has_embedding = true;
    bool has_head = true;
};

// How a tensor is cut across tensor-parallel ranks.
enum class Split : uint8_t { replicated, rows, cols };

struct ParamTensor {
    std::string name;    // Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
    int unit = 0;        // 0 embedding, 1 + i layer i, L + 1 head
    int64_t offset = 0;  // first element in the flat buffer
    Shape shape;         // this rank's shard
    Shape full_shape;    // the whole tensor (vocab not padded)
    Split split = Split::replicated;
    int64_t row0 = 0, col0 = 0;  // where the shard sits in the full tensor
    bool decay = true;           // AdamW weight decay (matrices yes, norm weights no)
    float init_std = 0;          // 0: a norm weight, initialised to 1
    int64_t numel() const { return shape.size() == 1 ? shape[0] : shape[0] * shape[1]; }
};

struct ParamUnit {
    std::string name;  // "embedding", "layer 3", "head"
    int64_t offset = 0, numel = 0;
    std::vector<int> tensors;  // indices into ParamLayout::tensors
    bool present() const { return !tensors.empty(); }
};

struct ParamLayout {
    std::vector<ParamTensor> tensors;
    std::vector<ParamUnit> units;  // L + 2 of them, indexed by unit id
    int64_t numel = 0;             // length of the flat buffer
    int tp = 1, tp_rank = 0;
    PipelineSlice slice;      // layer_end resolved
    int64_t vocab_rows = 0;   // embedding / lm_head rows held here (padded vocab / tp)
    int64_t vocab_start = 0;  // first vocab id held here

    // Throws naming the rule when tp does not divide heads, kv heads or ffn, or the slice is out of range.
    static ParamLayout build(const LlamaConfig& cfg, int tp = 1, int tp_rank = 0, PipelineSlice slice = {});
    int embedding_unit() const { return 0; }
    int layer_unit(int64_t layer) const { return 1 + (int)layer; }
    int head_unit() const { return (int)units.size() - 1; }
    const ParamTensor& find(const std::string& name) const;  // throws naming the missing tensor
};

// Fills the flat parameter buffer (any device): matrices std * N(0, 1) from the counter RNG keyed by
// (seed, name_stream(HF name), global element index), norms 1, vocab padding 0. Computed on the CPU so
// every device and layout gets the same bits.
void init_params(const ParamLayout& layout, uint64_t seed, Tensor& flat);

}  // namespace penta
