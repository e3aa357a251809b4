// ep_testing.hpp — what chapter 08's tests (and later chapters' layouts with ep) share: a small MoE model, a
// runner that trains N steps in any dp × tp (+sp) × ep layout with ZeRO-0..3 from the program's own pieces
// (ep_training.hpp) and returns the losses, grad norms, aux losses and the weights gathered into the one-rank
// layout, the one-rank reference of the same steps, and the check of one against the other (ARCHITECTURE.md §6).
// Implemented in ep_testing.cpp.
// Playbook: "Expert parallelism". Run the tests that use it: `make test CH=08`.
#pragma once
#include <string>

#include "../../08_expert_parallel/balance.hpp"
#include "../../08_expert_parallel/moe_layer.hpp"
#include "../01_single_gpu/equivalence.hpp"

namespace penta::ep_testing {

// tp_testing's `tiny` (h 32, 2 layers, 4 heads, 4 kv heads) with vocab 64 and 4 experts of width 32, top 2:
// ep 1, 2 and 4 and tp 2 all divide it
LlamaConfig moe_config();

struct EpLayout {
    int dp = 2, ep = 2, tp = 1;
    bool sp = false;
    int zero = 0;
    int64_t micro_batch = 2, grad_accum = 1;  // per dp rank
    int64_t seq = 8;
    MoeOptions moe;                           // balance aux (0.01), no capacity
    Recompute recompute = Recompute::none;
    Precision precision;                      // chapter 11 runs ep in low precision (the default: fp32)
    std::string str() const;
};

struct EpRun : penta::testing::Trained {
    std::vector<double> aux;           // per step: StepResult::aux_loss
    std::vector<double> dropped;       // per step: copies the capacity dropped (global batch)
    ParamLayout layout;                // the one-rank layout params is in
};

// a world of dp × tp ranks (the whole world) with ep carved from dp, trained as the program trains: the MoE
// layer on grid.ep() and grid.tp(), chapter 04's make_tp_optimizer (experts over edp), the balance hook, f/g
// (or SP) and the vocab-parallel loss when tp > 1; RandomTokens; the weights gathered into the one-rank layout
EpRun run_ep_layout(const LlamaConfig& cfg, const EpLayout& layout, int steps);
// one rank training the same global batch (dp · mb · ga sequences of seq tokens) as one micro-batch with the
// same MoE options (its balance hook included)
EpRun train_moe_one_rank(const LlamaConfig& cfg, const EpLayout& layout, int steps);
// run_ep_layout against train_moe_one_rank: losses, grad norms and aux losses per step within rtol, the
// dropped copies equal, the final weights per tensor (equivalence.hpp)
void check_ep_trains_like_one_rank(const LlamaConfig& cfg, const EpLayout& layout, int steps, double rtol);

// The full model's weights on every rank, in the layout of one rank (tp 1, ep 1): each rank adds the tensors
// (or parts) it owns — counts_in_grad_norm's rule: of the ranks holding the same values exactly one — into a
// zeroed buffer, and one all-reduce over the world sums them. flat: this rank's whole flat buffer (ZeRO-3:
// gathered first).
std::vector<float> gather_full_params(const ParamLayout& full, const ParamLayout& mine, const Tensor& flat,
                                      const GridCoords& coords, Comm& world);

// the one-rank layout of a MoE model
ParamLayout one_rank_layout(const LlamaConfig& cfg, const MoeOptions& opt);

}  // namespace penta::ep_testing
