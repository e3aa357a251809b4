// tp_testing.hpp — what the tensor- and sequence-parallel tests share (tests/04_tensor_parallel/test_tp.cpp,
// tests/05_sequence_parallel/test_sp.cpp; implemented in tp_testing.cpp): small models whose heads every tp
// divides, a random-token dataset, a runner that trains N steps in any dp × tp (× sp, ZeRO-0..3) layout with the
// programs' own optimizer setup and returns the losses, grad norms, gathered weights and per-layer traffic,
// and the check of such a run against the single-rank run of the same steps (ARCHITECTURE.md §6).
// A chapter-04 helper: it includes no later chapter, so SP's pieces come in as SpParts from chapter 05's tests.
// Playbook: "Tensor parallelism", "Sequence parallelism". Run: `make test CH=04`, `make test CH=05`.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../../04_tensor_parallel/tp_install.hpp"
#include "../../common/formulas.hpp"
#include "../../common/data.hpp"
#include "../../common/grid.hpp"
#include "../../common/model.hpp"
#include "../01_single_gpu/equivalence.hpp"

namespace penta::tp_testing {

// `tiny` (h 32, 2 layers, 4 heads, ffn 64) with 4 kv heads so tp 4 divides them, and the given vocabulary
LlamaConfig tp_config(int64_t vocab, bool tied = false);
// the same for tp 3 (an odd world): h 48, 6 heads, 3 kv heads, ffn 96 (head dim 8)
LlamaConfig tp3_config(int64_t vocab, bool tied = false);

// tokens and targets uniform in [0, vocab), a pure function of (sample id, position); the last target of a
// sample is ignored (-1)
struct RandomTokens : Dataset {
    explicit RandomTokens(int32_t vocab) : vocab(vocab) {}
    int32_t vocab_size() const override { return vocab; }
    void get(int64_t sample_id, int64_t T, int32_t* tokens, int32_t* targets) const override;
    std::string describe() const override { return "random tokens"; }
    int32_t vocab;
};

// Chapter 05's pieces that a layout with sequence parallelism needs (05_sequence_parallel/sequence_parallel.hpp).
// This chapter-04 helper may not include a later chapter (scripts/check_layering.sh), so chapter 05's tests
// pass them in: sp_parts() of tests/05_sequence_parallel/sp_testing.hpp. Chapter 04's tests pass none.
// SP needs nothing but its boundary: the model, built with ModelOptions::sequence_parallel, asks it to sum
// the norms' gradients over tp.
struct SpParts {
    // SP's boundary on the tp group (SequenceParallel)
    std::function<std::unique_ptr<TensorParallel>(Comm& tp)> boundary;
    // the bytes the norm / residual regions keep for backward (norm_region_activation_bytes)
    std::function<int64_t(const MicroBatchActs& acts)> norm_region_bytes;
};

struct Layout {
    int tp = 1, dp = 1;
    bool sp = false;
    int zero = 0;  // 0: chapter 02's all-reduce over dp; 1-3: chapter 03's ZeRO over dp
    int64_t micro_batch = 4, grad_accum = 1;  // per dp rank
    int64_t seq = 8;
    Recompute recompute = Recompute::none;
    Precision precision;  // chapter 11 runs the layouts in bf16 (the default: fp32)
    std::string str() const;
};

// losses and grad norms per step, the final weights gathered into the unsharded layout, and traffic
struct Run : penta::testing::Trained {
    std::vector<LayerTraffic::Bytes> traffic;  // per layer, for one measured micro-batch before training
    // that micro-batch's collectives by op (CommOp) in the boundary's four calls at the tp region's edges, all
    // layers, the embedding's and the head's edges included (the norms' gradient sums under SP are not the region's)
    std::array<int64_t, kNumCommOps> region_calls{};
    bool sequence_parallel = false;  // the layout's sp
    int64_t norm_region_bytes = 0;             // that micro-batch's sp->norm_region_bytes (0 without sp)
    ModelStateBytes state;                     // params / grads / master / optim bytes held after training
    std::vector<int64_t> unit_numels;          // of this rank's (tp-sharded) layout: ZeRO's shard sizes
    int64_t norm_reductions = 0;               // the optimizer's grad-norm all-reduces over the whole run
    int64_t world_scalar_reductions = 0;       // all scalar all-reduces on the world group over the run
    GridCoords coords;                         // this rank's place in the grid
};

// steps of AdamW (clipping active) on RandomTokens, on a grid of dp × tp ranks (the whole world), with
// make_tp_optimizer's optimizer and hooks (tp_optimizer.hpp), the model built with sequence parallelism when
// layout.sp. sp: chapter 05's parts, required when layout.sp; given, they also measure norm_region_bytes.
// The measured micro-batch runs as the programs' measure_micro_batch does: before training, with the hooks
// in place, which then finish their reductions.
Run run_layout(const LlamaConfig& cfg, const Layout& layout, int steps, const SpParts* sp = nullptr);

// run_layout against the single-rank run of the same global batch (one micro-batch of dp·mb·ga sequences):
// losses and grad norms per step within rtol, the final weights within rtol + rtol × the tensor's largest
// element (equivalence.hpp says why). Also: the global grad norm took exactly one all-reduce per step (over
// the world, the only scalar reduction on it), and each rank's model state equals the ZeRO formula applied
// to its tp shard (zero_model_state_bytes_fp32; stage 0: plain DP). `note` is added to the layout's name in failure messages; sp as for
// run_layout.
void check_trains_like_one_rank(const LlamaConfig& cfg, const Layout& layout, int steps, double rtol,
                                const std::string& note = "", const SpParts* sp = nullptr);

// The pieces against the unsharded computation, on the ranks of b's group (seq_split: SP's token rows):
// a column-parallel linear followed by a row-parallel one between b's enter and exit, forward and backward,
// and the bytes b counts for it (one all-reduce's worth per direction, SP's pair too)
void check_column_row_pair(TensorParallel& b, bool seq_split);
// causal GQA attention with 2t query heads and t kv heads cut by heads (q/k/v rows, o_proj columns)
void check_head_split_attention(TensorParallel& b, bool seq_split);
// the vocab-parallel embedding of a V-word table followed by b's exit, forward and backward
void check_vocab_embedding(TensorParallel& b, int64_t V, bool seq_split);
// one forward + backward of the sharded model with b and the vocab-parallel loss: the loss, every gathered
// gradient and the gathered logits. sequence_parallel: b is SP's boundary, so the model is built for it
// (its norms' gradients summed over tp as backward computes them).
void check_model_step(const LlamaConfig& cfg, TensorParallel& b, Recompute recompute, bool sequence_parallel = false);
// run.traffic: every layer's forward and backward bytes == half of tp_layer_comm_elements, f32, exactly; and
// run.region_calls: plain TP's region edges only all-reduce, SP's only all-gather and reduce-scatter
void check_layer_traffic(const Run& run, const Layout& layout, int64_t hidden);

// what every layout run and its one-rank reference share: the model's seed, AdamW (clipping active) at a
// constant lr (chapter 06's runner too)
constexpr uint64_t kModelSeed = 7;
inline const AdamWConfig kAdamW{1e-3f, 0.9f, 0.95f, 1e-6f, 0.1f};
constexpr float kClip = 0.5f;
// the reference of those runs: `steps` steps of one rank on the global batch of `rows` sequences of `seq`
// tokens as one micro-batch (RandomTokens)
penta::testing::Trained train_one_rank(const LlamaConfig& cfg, int64_t seq, int64_t rows, Recompute recompute,
                                       int steps, const Precision& precision = Precision{});

// a world of tp ranks, all in one tensor-parallel group
ParallelGrid tp_grid(const LlamaConfig& cfg, int tp);

// rows [r0, r0 + rows) and columns [c0, c0 + cols) of the host matrix a (R, C)
std::vector<float> block(const std::vector<float>& a, int64_t C, int64_t r0, int64_t rows, int64_t c0, int64_t cols);

}  // namespace penta::tp_testing
