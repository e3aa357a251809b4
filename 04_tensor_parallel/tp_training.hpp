// tp_training.hpp — a dp × tp training run assembled from the flags: what chapter 04's program (and
// chapter 05's, which swaps in the sequence-parallel boundary) is made of.
//
// Playbook: "Tensor parallelism", combined with "Data parallelism" and "ZeRO" the way Megatron-LM does:
// ranks r = tp_i + tp · dp_i (grid.hpp), so the tp ranks of one model replica are consecutive (one node);
// each tp group holds one copy of the model, cut by ParamLayout (tp, tp_i); the dp groups join equal
// shards of different replicas, and chapter 02's hooks or chapter 03's ZeRO-1/2/3 reduce (and shard) their
// flat buffers over dp exactly as without TP — a tp shard is just a smaller flat buffer. What TP adds:
//   - f / g in every layer (tensor_parallel.hpp), counted per layer by the LayerTraffic observer;
//   - the vocab-parallel loss, and the vocab-shard gather for evaluation (vocab_parallel.hpp).
// The global grad norm comes from the layout (each tensor knows tp cuts it), so no hook is wrapped.
//   mpirun -np 2 build/bin/04_tensor_parallel --tp 2
//   mpirun -np 4 build/bin/04_tensor_parallel --tp 2 --dp 2 --zero 3
#pragma once
#include <memory>

#include "../02_data_parallel/data_parallel.hpp"
#include "../03_zero/zero.hpp"
#include "../common/grid.hpp"
#include "../common/train_loop.hpp"
#include "tensor_parallel.hpp"
#include "vocab_parallel.hpp"

namespace penta {

// Registers chapter 01's flags, the parallel ones and --zero 0|1|2|3 on a parser for `program`, parses and
// validates them. False when --help was given.
bool parse_tensor_parallel_flags(int argc, char** argv, const char* program, const char* summary, TrainConfig& cfg,
                                 int64_t& zero);

// The optimizer side of a dp × tp run, built one way for the programs (TensorParallelTraining) and the
// tests (tests/04_tensor_parallel/tp_testing.cpp, so they train with the programs' own setup): without
// ZeRO, AdamW over the rank's whole flat buffer with chapter 02's all-reduce over dp (none when dp has one
// rank); with ZeRO (the model built with zero_model_options(stage)), chapter 03's hooks and their AdamW
// over this rank's shard. Movable; the pointers stay valid. data: the group the gradients are reduced (and
// ZeRO sharded) over, spanning the grid axes data_axes — dp by default; chapter 06 passes dp × cp, whose ranks
// also hold different tokens of the same weights. Units sharded over ep (a MoE's experts, chapter 08) are
// reduced over the grid's edp instead (reduce_groups.hpp).
struct TensorParallelOptimizer {
    std::unique_ptr<AdamW> own_optim;           // without ZeRO
    std::unique_ptr<DataParallelHooks> dp_hooks;  // without ZeRO, dp > 1
    std::unique_ptr<ZeroHooks> zero;             // with ZeRO
    AdamW* optim = nullptr;                      // own_optim, or ZeRO's
    std::vector<StepHooks*> hooks;               // what the trainer runs
};
TensorParallelOptimizer make_tp_optimizer(Model& model, ParallelGrid& grid, int64_t zero, const AdamWConfig& ac,
                                          Comm* data = nullptr, Axes data_axes = kAxisDP);

class TensorParallelTraining {
   public:
    // Checks the layout before any work (validate_grid: --dp × --tp = ranks, --tp divides the heads),
    // then builds this rank's model shard (with --sp, laid out for sequence parallelism), the vocab-parallel
    // loss and make_tp_optimizer's optimizer and hooks (--zero 0: DP all-reduce; 1-3: ZeRO over dp).
    // The boundary is f/g (TensorParallel) until set_boundary swaps it.
    TensorParallelTraining(const TrainConfig& cfg, int64_t zero);
    ~TensorParallelTraining();

    // installs b (TensorParallel, or chapter 05's SequenceParallel) and the per-layer byte meter over it
    void set_boundary(std::unique_ptr<TensorParallel> b);

    // One forward + backward of step 0's first micro-batch, outside training (the hooks finish their
    // reductions and the gradients are zeroed after): the boundary's bytes per layer, and inspect(acts)
    // between the two for what the forward kept. Resets the allocator's peaks afterwards.
    std::vector<LayerTraffic::Bytes> measure_micro_batch(const std::function<void(const MicroBatchActs&)>& inspect = {});
    // rank 0 prints the layout, the model and the batch
    void print_header(const char* program) const;
    // the per-layer table: measured forward / backward bytes beside 8(t-1)/t · s b h elements; boundary
    // names the operators that sent them ("f and g", "SP all-gather / reduce-scatter")
    void print_traffic(const std::vector<LayerTraffic::Bytes>& layers, const char* boundary) const;
    // rank 0: model-state bytes per rank (params, grads, master, optimizer) beside the ZeRO formula
    void print_model_state() const;
    // the step loop of chapter 01 with these hooks; evaluation gathers the vocab shards; each step line
    // adds what the tp group sent in that step (evaluation steps include its forward)
    StepResult run();

    const TrainConfig cfg;
    const int64_t zero;
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
