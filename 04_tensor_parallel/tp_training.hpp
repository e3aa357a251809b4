// tp_training.hpp — a dp × tp training run assembled from the flags: what chapter 04's program (and
// chapter 05's, which swaps the boundary and wraps the hooks for sequence parallelism) is made of.
//
// Playbook: "Tensor parallelism", combined with "Data parallelism" and "ZeRO" the way Megatron-LM does:
// ranks r = tp_i + tp · dp_i (grid.hpp), so the tp ranks of one model replica are consecutive (one node);
// each tp group holds one copy of the model, cut by ParamLayout::build(cfg, tp, tp_i); the dp groups
// join equal shards of different replicas, and chapter 02's hooks (or chapter 03's ZeRO-1) reduce their
// gradients over dp exactly as without TP. What TP adds to the step:
//   - f / g in every layer (tensor_parallel.hpp), counted per layer by LayerTraffic;
//   - the vocab-parallel loss, and the vocab-shard gather for evaluation (vocab_parallel.hpp);
//   - the global grad norm over tp (sharded squares summed, replicated ones once).
//   mpirun -np 2 build/bin/04_tensor_parallel --tp 2
//   mpirun -np 4 build/bin/04_tensor_parallel --tp 2 --dp 2 --zero 1
#pragma once
#include <memory>

#include "../01_single_gpu/train_loop.hpp"
#include "../common/grid.hpp"
#include "tensor_parallel.hpp"
#include "vocab_parallel.hpp"

namespace penta {

// Registers chapter 01's flags, the parallel ones and --zero 0|1 on a parser for `program`, parses and
// validates them. False when --help was given.
bool parse_tensor_parallel_flags(int argc, char** argv, const char* program, const char* summary, TrainConfig& cfg,
                                 bool& zero1);

// The optimizer side of a dp × tp run, built one way for the programs (TensorParallelTraining) and the
// tests (tests/04_tensor_parallel/tp_testing.cpp, so they train with the programs' own setup): over dp, chapter 02's all-reduce
// or chapter 03's ZeRO-1 — both see a flat buffer, sharded by tp or not — and the grad norm summed over tp.
// Chapter 05 wraps the hooks for sequence parallelism (wrap). Movable; the pointers stay valid.
struct TensorParallelOptimizer {
    std::unique_ptr<AdamW> own_optim;  // without ZeRO
    AdamW* optim = nullptr;            // own_optim, or ZeRO-1's (over this rank's shard)
    std::vector<ShardPiece> pieces;    // ZeRO-1's shard of the flat buffer; empty: the whole buffer
    std::unique_ptr<StepHooks> dp_hooks, outer_hooks;
    StepHooks* hooks = nullptr;  // what the step runs: dp_hooks, or outer_hooks once wrap installed one

    // installs h (which usually wraps *hooks) as the hooks the step runs
    void wrap(std::unique_ptr<StepHooks> h);
};

// AdamW (ac) over the model's whole flat buffer with chapter 02's DataParallelHooks over dp (the single-
// device hooks when dp has one rank), or, with zero1, chapter 03's ZeRO-1 over dp (the model built with
// zero_model_options(ZeroStage::zero1, ...)); then the optimizer's grad norm gets the sum over tp.
TensorParallelOptimizer make_tp_optimizer(Model& model, Comm& dp, Comm& tp, bool zero1, const AdamWConfig& ac);

class TensorParallelTraining {
   public:
    // Checks the layout before any work (validate_grid: --dp × --tp = ranks, --tp divides the heads),
    // then builds this rank's model shard, the vocab-parallel loss and make_tp_optimizer's optimizer (AdamW
    // over the whole shard with chapter 02's DP hooks, or chapter 03's ZeRO-1 over the dp group; TP grad norm).
    // The boundary is f/g (TensorParallel) until set_boundary swaps it.
    TensorParallelTraining(const TrainConfig& cfg, bool zero1);
    ~TensorParallelTraining();

    // installs b (TensorParallel, or chapter 05's SequenceParallel) and the per-layer byte meter over it
    void set_boundary(std::unique_ptr<TensorParallel> b);
    // the hooks the step runs: chapter 05 wraps hooks() in its own and installs that
    StepHooks& hooks() { return *opt_.hooks; }
    void set_hooks(std::unique_ptr<StepHooks> h) { opt_.wrap(std::move(h)); }
    AdamW& optimizer() { return *opt_.optim; }
    const std::vector<ShardPiece>& pieces() const { return opt_.pieces; }  // ZeRO-1's shard; empty: whole buffer

    // One forward + backward of step 0's first micro-batch, outside training (gradients zeroed after):
    // the boundary's bytes per layer, and inspect(acts) between the two for what the forward kept.
    // Resets the allocator's peaks afterwards.
    std::vector<LayerTraffic::Bytes> measure_micro_batch(const std::function<void(const MicroBatchActs&)>& inspect = {});
    // rank 0 prints the layout, the model and the batch
    void print_header(const char* program) const;
    // the per-layer table: measured forward / backward bytes beside 8(t-1)/t · s b h elements; boundary
    // names the operators that sent them ("f and g", "SP all-gather / reduce-scatter")
    void print_traffic(const std::vector<LayerTraffic::Bytes>& layers, const char* boundary) const;
    // the step loop of chapter 01 with these hooks; evaluation gathers the vocab shards; each step line
    // adds what the tp group sent in that step (evaluation steps include its forward)
    StepResult run();

    const TrainConfig cfg;
    Device device;
    LlamaConfig mc;
    std::unique_ptr<ParallelGrid> grid;
    std::unique_ptr<Dataset> data;
    std::unique_ptr<Model> model;

   private:
    std::unique_ptr<VocabParallelCrossEntropy> loss_;
    std::unique_ptr<TensorParallel> boundary_;
    std::unique_ptr<LayerTraffic> meter_;
    TensorParallelOptimizer opt_;  // last: its hooks refer to the model and the groups
};

}  // namespace penta
