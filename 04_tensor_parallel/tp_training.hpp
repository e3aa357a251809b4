// tp_training.hpp — a dp × tp training run assembled from the flags: what chapter 04's program (and
// chapter 05's, which swaps in the sequence-parallel boundary) is made of.
//
// Playbook: "Tensor parallelism", combined with "Data parallelism" and "ZeRO" the way Megatron-LM does:
// ranks r = tp_i + tp · dp_i (grid.hpp), so the tp ranks of one model replica are consecutive (one node);
// each tp group holds one copy of the model, cut by ParamLayout (tp, tp_i); the dp groups join equal
// shards of different replicas, and chapter 02's hooks or chapter 03's ZeRO-1/2/3 reduce (and shard) their
// flat buffers over dp exactly as without TP — a tp shard is just a smaller flat buffer. What TP adds:
//   - the matrices cut by the parallel layers' rules (parallel_layers.hpp), installed with f / g and the
//     loss by tp_install.hpp;
//   - f / g in every layer (tensor_parallel.hpp), counted per layer by the LayerTraffic observer;
//   - the vocab-parallel loss, and the vocab-shard gather for evaluation (vocab_parallel.hpp);
//   - over dp, tp_optimizer.hpp's AdamW and hooks.
// The global grad norm comes from the layout (each tensor knows tp cuts it), so no hook is wrapped.
//   mpirun -np 2 build/bin/04_tensor_parallel --tp 2
//   mpirun -np 4 build/bin/04_tensor_parallel --tp 2 --dp 2 --zero 3
#pragma once
#include <memory>

#include "../common/grid.hpp"
#include "../common/train_loop.hpp"
#include "tp_install.hpp"
#include "tp_optimizer.hpp"

namespace penta {

// Registers chapter 01's flags, the parallel ones and --zero 0|1|2|3 on a parser for `program`, parses and
// validates them. False when --help was given.
bool parse_tensor_parallel_flags(int argc, char** argv, const char* program, const char* summary, TrainConfig& cfg,
                                 int64_t& zero);

class TensorParallelTraining {
   public:
    // Checks the layout before any work (validate_grid: --dp × --tp = ranks, --tp divides the heads),
    // then builds this rank's model shard (with --sp, laid out for sequence parallelism), the vocab-parallel
    // loss and make_tp_optimizer's optimizer and hooks (--zero 0: DP all-reduce; 1-3: ZeRO over dp).
    // Tensor parallelism enters through tp_install.hpp: the boundary is f/g (TensorParallel) until install
    // gives another.
    TensorParallelTraining(const TrainConfig& cfg, int64_t zero);
    ~TensorParallelTraining();

    // installs b (TensorParallel, or chapter 05's SequenceParallel) with the vocab-parallel loss
    // (install_tensor_parallel), and the per-layer byte meter over b
    void install(std::unique_ptr<TensorParallel> b);

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
    TensorParallelSeams seams_;  // the boundary and the vocab-parallel loss
    std::unique_ptr<LayerTraffic> meter_;
    TensorParallelOptimizer opt_;  // last: its hooks refer to the model and the groups
};

}  // namespace penta
