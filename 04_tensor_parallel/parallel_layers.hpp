// parallel_layers.hpp — Megatron-LM's three parallel layers, each with its split rule (which part of W a tp
// rank holds) and the collectives of its forward and backward, and the sharding plan that gives the model's
// layout those rules.
//
// Playbook: "Tensor parallelism" — "Tensor Parallelism in a Transformer Block". The model's parts declare
// each matrix with its kind (Split in common/model_layout.hpp: q/k/v and gate/up column, o_proj and down_proj
// row, the embedding and lm_head vocab); the layout asks the plan of its LayoutOptions which part of a tensor
// of that kind this rank holds. MegatronSharding answers with the rules below, so the shard shapes of every
// program and test with --tp > 1 come from here (tensor_parallel_options puts the plan in ModelOptions).
// The collectives are f and g (tensor_parallel.hpp), which the model calls around the linears
// (common/model.cpp): f before a column-parallel linear, g after a row-parallel one.
// W is (out, in), y = x W^T, x (N, in); t ranks; rank r.
//   mpirun -np 2 build/bin/04_tensor_parallel --tp 2
// Test: `mpirun -np 2 build/bin/tests_04 -ts='ch04 np2' -tc='*column-parallel*'`.
#pragma once
#include <string>

#include "../common/model.hpp"

namespace penta {

// Column-parallel linear (q_proj, k_proj, v_proj, gate_proj, up_proj).
//   split:    rank r holds rows [r·out/t, (r+1)·out/t) of W: out/t whole output features (heads, SwiGLU
//             columns), every input feature. t must divide out.
//   forward:  f before it: identity (x is whole on every rank); y (N, out/t) is this rank's columns of y.
//   backward: f's all-reduce of dx over tp (each rank's columns gave part of dx = dy W).
struct ColumnParallelLinear {
    static constexpr Split kind = Split::column;
    static TensorShard shard(const std::string& name, const Shape& full, int tp, int rank);
};

// Row-parallel linear (o_proj, down_proj): takes a column-parallel region's split output.
//   split:    rank r holds columns [r·in/t, (r+1)·in/t) of W, every output feature. t must divide in.
//   forward:  g after it: all-reduce of the partial products x_r W_r^T (N, out) over tp.
//   backward: g's identity (dy is whole on every rank); dx (N, in/t) stays local.
struct RowParallelLinear {
    static constexpr Split kind = Split::row;
    static TensorShard shard(const std::string& name, const Shape& full, int tp, int rank);
};

// Vocab-parallel embedding (model.embed_tokens, and lm_head, or the tied table read by the head).
//   split:    the vocabulary padded up to Vp, a multiple of t; rank r holds rows [r·Vp/t, (r+1)·Vp/t)
//             (ParamLayout::vocab_start, vocab_rows). Padding rows (ids ≥ vocab) are zero and never a target.
//   forward:  as the embedding, a token outside this rank's rows gives a zero row, then g: all-reduce of
//             the (N, h) rows over tp; as lm_head, f (identity) and the logits' (N, Vp/t) shard, whose loss
//             is VocabParallelCrossEntropy (vocab_parallel.hpp: three all-reduces of N floats).
//   backward: the embedding: g's identity, each rank adds dy to its own rows only; lm_head: f's all-reduce
//             of d xn over tp.
struct VocabParallelEmbedding {
    static constexpr Split kind = Split::vocab;
    static TensorShard shard(const std::string& name, const Shape& full, int tp, int rank);
};

// The sharding plan of a tensor-parallel layout: each kind by its layer's rule above, norms whole.
struct MegatronSharding : ShardingPlan {
    TensorShard shard(const std::string& name, Split split, const Shape& full, int tp, int rank) const override;
};
const ShardingPlan& megatron_sharding();

// The layout of tp rank `rank` of `tp` (a pipeline stage's `slice`): ParamLayout::build with MegatronSharding.
ParamLayout tensor_parallel_layout(const LlamaConfig& cfg, int tp, int rank, PipelineSlice slice = {});

}  // namespace penta
