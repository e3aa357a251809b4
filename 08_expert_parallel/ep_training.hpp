// ep_training.hpp — a dp × tp (+sp) training run of a mixture-of-experts model with its experts spread over
// --ep ranks, assembled from the flags: what chapter 08's program is made of, and what its tests train with.
//
// Playbook: "Expert parallelism". Rank r = tp_i + tp · dp_i (grid.hpp); ep is carved from the dp ranks: ep
// consecutive dp ranks form an ep group (they hold different experts and exchange tokens), and the dp ranks
// with the same place in their ep group form an edp group (they hold the same experts). What EP adds:
//   - the model's MLP is the MoE layer (moe_layer.hpp) on grid.ep(), its experts cut over --tp like chapter
//     04's MLP;
//   - the gradients: the experts' unit summed (or ZeRO-sharded) over edp, the rest over dp — chapter 04's
//     make_tp_optimizer, which picks each unit's group (reduce_groups.hpp);
//   - the balance hook (balance.hpp): the global batch's load per expert, DeepSeek-V3's bias update.
//   mpirun -np 2 build/bin/08_expert_parallel --dp 2 --ep 2
//   mpirun -np 4 build/bin/08_expert_parallel --dp 2 --tp 2 --ep 2
#pragma once
#include <memory>

#include "../04_tensor_parallel/tp_optimizer.hpp"
#include "../05_sequence_parallel/sequence_parallel.hpp"
#include "../common/train_loop.hpp"
#include "balance.hpp"
#include "moe_layer.hpp"

namespace penta {

// the MoE flags on top of chapter 04's (--zero included)
struct ExpertParallelFlags {
    int64_t zero = 0;
    std::string balance = "aux";  // --moe-balance
    float aux_coef = 0.01f;       // --moe-aux-coef
    float bias_rate = 1e-3f;      // --moe-bias-rate
    float capacity = 0;           // --moe-capacity
    std::string router;           // --moe-router softmax | sigmoid ("": the model's)
    int64_t shared = -1;          // --moe-shared N (-1: the model's)
};
// registers chapter 01's flags, the parallel ones and the MoE ones, parses and validates them (the layout
// rules of this chapter included). False when --help was given.
bool parse_expert_parallel_flags(int argc, char** argv, TrainConfig& cfg, ExpertParallelFlags& f);
// the MoE flags (--moe-balance ... --moe-shared) on a parser, and their rules: what chapter 09's program shares
void register_moe_flags(Flags& flags, ExpertParallelFlags& f);
void check_moe_flags(const ExpertParallelFlags& f);
MoeOptions moe_options(const ExpertParallelFlags& f);
// --model with --moe-router / --moe-shared applied; a dense model is refused (naming the MoE presets)
LlamaConfig resolve_moe_model(const TrainConfig& cfg, const ExpertParallelFlags& f);
// the experts' rules of a layout: --ep divides the experts (each ep rank holds E/ep), --tp their width
void check_expert_layout(const LlamaConfig& mc, int64_t ep, int64_t tp);

// What one measured micro-batch (forward + backward) did on this rank.
struct EpMeasured {
    std::vector<MoeLayerStats> layers;  // per layer (dense ones empty)
    double ep_bytes = 0;                // what this rank sent on grid.ep()
    int64_t saved_bytes = 0;            // Tag::activations after the forward
};

class ExpertParallelTraining {
   public:
    // checks the layout before any work (validate_grid: --ep divides --dp; --ep divides the experts; --tp
    // divides the heads and the experts' width), builds this rank's model with the MoE layer, the tensor-
    // parallel seams when --tp > 1, the optimizer (DP all-reduce or ZeRO; experts over edp) and the balance hook
    ExpertParallelTraining(const TrainConfig& cfg, const ExpertParallelFlags& f);
    ~ExpertParallelTraining();

    EpMeasured measure_micro_batch();  // step 0's first micro-batch outside training; stats reset after
    void print_header() const;
    // rank 0: the routing of layer 0 (copies each ep rank sends each), the load per expert, and every rank's
    // all-to-all bytes beside the formula for that routing (formulas.hpp: ep_layer_all_to_all_bytes)
    void print_measured(const EpMeasured& m);
    // chapter 01's loop; each step line adds the aux loss, the dropped copies, MaxVio, the balance score and
    // the ep group's MiB, with the load histogram under it (the JSON line carries the loads per layer)
    StepResult run();

    const TrainConfig cfg;
    const ExpertParallelFlags flags;
    Device device;
    LlamaConfig mc;
    std::unique_ptr<ParallelGrid> grid;
    std::unique_ptr<Dataset> data;
    std::shared_ptr<MoeLayer> moe;
    std::unique_ptr<Model> model;
    std::unique_ptr<ExpertBalanceHooks> balance;

   private:
    TensorParallelSeams seams_;    // f/g (or SP) and the vocab-parallel loss when --tp > 1
    TensorParallelOptimizer opt_;  // last: its hooks refer to the model and the groups
};

// the load of each expert as a bar of ▁▂▃▄▅▆▇█, scaled to the busiest ("" for no load)
std::string load_bars(const std::vector<double>& load);

}  // namespace penta
