// cp_training.hpp — a dp × cp × tp (+sp) training run assembled from the flags: what chapter 06's program is
// made of, and the pieces its tests train with, so both train the same way.
//
// Playbook: "Context parallelism". Rank r = tp_i + tp·(cp_i + cp·dp_i) (grid.hpp). What CP changes:
//   - the data: each cp rank of a dp replica reads the same rows and holds its chunks of every sequence
//     (ContextSharder), each token with its global position;
//   - the attention kernel: ring or all-gather attention over grid.cp() (ContextParallelAttention);
//   - the sums: the target-token count and the loss over dp × cp, and the gradients reduced (or ZeRO
//     sharded) over dp × cp — the cp ranks hold the same weights and saw different tokens, which is all
//     data parallelism means. Nothing else in the model knows.
//   mpirun -np 4 build/bin/06_context_parallel --cp 4
//   mpirun -np 4 build/bin/06_context_parallel --cp 2 --tp 2 --sp --cp-shard zigzag
#pragma once
#include <memory>

#include "../04_tensor_parallel/tp_optimizer.hpp"
#include "../05_sequence_parallel/sequence_parallel.hpp"
#include "../common/train_loop.hpp"
#include "ring_attention.hpp"

namespace penta {

// CP's flags on top of chapter 04's (--zero included): --cp-shard, --cp-attn
struct ContextParallelFlags {
    int64_t zero = 0;
    std::string shard = "zigzag", attn = "ring";
};
// registers chapter 01's flags, the parallel ones and CP's, parses and validates them (the sequence rule
// of --cp-shard included). False when --help was given.
bool parse_context_parallel_flags(int argc, char** argv, TrainConfig& cfg, ContextParallelFlags& cpf);
// CP's own flags (--cp-shard, --cp-attn) on a parser, and their rules (the names, --seq against the shards, --sp's
// token blocks): what chapter 09's program shares with this one
void register_context_parallel_flags(Flags& flags, ContextParallelFlags& cpf);
void check_context_parallel_flags(const TrainConfig& cfg, const ContextParallelFlags& cpf);

// the attention core of this rank's cp group, for ModelOptions::attention_core
std::shared_ptr<ContextParallelAttention> make_context_attention(ParallelGrid& grid, CpShard shard, CpAttn attn,
                                                                 int64_t seq);
// the rows of the dp replica (chapter 02's plan over grid.dp()), this cp rank's chunks of them, and the
// token count and loss summed over dp × cp
BatchPlan context_parallel_plan(const TrainConfig& cfg, ParallelGrid& grid, CpShard shard);
// chapter 04's optimizer setup with the gradients reduced (--zero 0) or sharded (--zero 1-3) over dp × cp
TensorParallelOptimizer make_cp_optimizer(Model& model, ParallelGrid& grid, int64_t zero, const AdamWConfig& ac);

class ContextParallelTraining {
   public:
    // checks the layout (validate_grid, --seq against --cp-shard), builds this rank's model with the CP
    // attention core (tp shard, SP, ZeRO as flagged), the tensor-parallel seams when --tp > 1, the optimizer
    ContextParallelTraining(const TrainConfig& cfg, const ContextParallelFlags& cpf);
    ~ContextParallelTraining();

    // One forward + backward of step 0's first micro-batch outside training (the hooks finish and the
    // gradients are zeroed after), with layer 0's ring recorded: its attention blocks per ring step, the
    // kernel's stats and the cp group's bytes of it, and the activations its forward kept
    struct Measured {
        std::vector<ContextParallelAttention::Cell> cells;  // layer 0, this rank
        CpAttentionStats stats;
        double cp_bytes = 0;        // what this rank sent on grid.cp() (forward + backward, every layer)
        int64_t saved_bytes = 0;    // Tag::activations after the forward
        int64_t peak_workspace = 0; // Tag::workspace peak over forward + backward
    };
    Measured measure_micro_batch();
    void print_header() const;
    // rank 0 prints what every rank measured: the ring diagram, blocks vs the causal formula, bytes vs the
    // variant's formula, exposed wait, activations vs the cp = 1 formula
    void print_measured(const Measured& m) const;
    StepResult run();  // chapter 01's loop; each step line adds the cp group's MiB, exposed ms and hidden %

    const TrainConfig cfg;
    const ContextParallelFlags cpf;
    CpShard shard;
    CpAttn attn;
    Device device;
    LlamaConfig mc;
    std::unique_ptr<ParallelGrid> grid;
    std::unique_ptr<Dataset> data;
    std::shared_ptr<ContextParallelAttention> attention;
    std::unique_ptr<Model> model;

   private:
    TensorParallelSeams seams_;    // f/g (or SP) and the vocab-parallel loss when --tp > 1
    TensorParallelOptimizer opt_;  // last: its hooks refer to the model and the groups
};

}  // namespace penta
