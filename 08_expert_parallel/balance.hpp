// balance.hpp — the step's view of the experts' load: tokens per expert over the global batch, the dropped
// copies, the balance metrics, and DeepSeek-V3's auxiliary-loss-free bias update.
//
// Playbook: "Expert parallelism". The MoE layers record what their routing did in every training
// micro-batch (MoeLayer::stats); after the optimizer step this hook sums those counts over the batch group
// (the ranks that hold different tokens: dp) — one all-reduce of L·2E int32 — so every rank sees the load of
// the whole global batch, and then
//   --moe-balance bias:  b_e += rate · sign(mean_e' load_e' - load_e) per MoE layer (Wang et al. 2024,
//                        "Auxiliary-loss-free load balancing"; DeepSeek-V3 §2.1.2): the same update on
//                        every rank, so the replicas stay equal
// and reports, per step: the load histogram (routed choices per expert, all MoE layers), the copies the
// capacity dropped, MaxVio = max_e load_e / mean load - 1 (the paper's imbalance measure, averaged over the
// layers; 0 when perfectly balanced) and the mean balance score B_s of router.hpp (1 when balanced).
// The bias is training state outside the flat buffer and the optimizer: the hook hands it to the checkpoint
// (common/checkpoint_state.hpp), so a resumed bias run continues bit-exactly.
// Test: `make test CH=08` (tests/08_expert_parallel/test_ep.cpp).
#pragma once
#include <vector>

#include "../common/checkpoint_state.hpp"
#include "../common/training_step.hpp"
#include "moe_layer.hpp"

namespace penta {

struct ExpertLoad {
    std::vector<std::vector<double>> routed;  // [layer][expert] choices over the global batch (dense layers empty)
    std::vector<std::vector<double>> kept;    // [layer][expert] copies computed
    std::vector<double> total;   // (E) routed summed over the MoE layers: the histogram
    double dropped = 0;          // copies dropped by the capacity, all layers
    double max_vio = 0;          // mean over MoE layers of max load / mean load - 1
    double balance = 0;          // mean over MoE layers of the global batch's balance score (1: balanced)
    int64_t moe_layers = 0;
};
// MaxVio of one layer's loads (0 for no load)
double max_violation(const std::vector<double>& load);

class ExpertBalanceHooks : public StepHooks, public CheckpointedState {
   public:
    // batch: the group whose ranks hold different tokens of the global batch (the BatchPlan's batch_group;
    // nullptr: this rank holds them all)
    ExpertBalanceHooks(MoeLayer& moe, Comm* batch);
    void begin_step() override { moe_.reset_stats(); }
    void after_update() override;  // sums the step's counts over the batch group; the bias update
    const ExpertLoad& last_step() const { return load_; }
    // --moe-balance bias: each MoE layer's (E) bias this stage holds, named as DeepSeek-V3's checkpoints name
    // it ("model.layers.1.block_sparse_moe.gate.e_score_correction_bias"), replicated like the router (every
    // rank updates it alike), so the router's owner writes it; nothing with another balance
    std::vector<StateTensor> checkpoint_state(const ParamLayout& layout) override;
    // the load of what was recorded since the last reset, summed over the batch group (collective)
    ExpertLoad collect();

   private:
    MoeLayer& moe_;
    Comm* batch_;
    ExpertLoad load_;
};

}  // namespace penta
