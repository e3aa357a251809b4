// five_d_testing.hpp — what chapter 09's training tests share: a runner that trains N steps in any dp × pp × cp ×
// tp (+sp) × ep layout with ZeRO, dense or MoE, built with the program's own parts (five_d.hpp: FiveDParts), and
// returns the losses, grad norms and the weights gathered into one rank's layout; and the check of such a run
// against one rank training the same global batch (ARCHITECTURE.md §6), reusing chapters 04's and 08's references.
// Implemented in five_d_testing.cpp. Playbook: "5D parallelism". Run the tests that use it: `make test CH=09`.
#pragma once
#include <string>

#include "../../09_5d/five_d.hpp"
#include "../04_tensor_parallel/tp_testing.hpp"
#include "../08_expert_parallel/ep_testing.hpp"

namespace penta::five_d_testing {

struct FiveDLayout {
    int dp = 1, pp = 1, cp = 1, tp = 1, ep = 1;
    bool sp = false;
    int zero = 0;
    std::string schedule = "1f1b";
    bool moe = false;                      // ep_testing::moe_config() instead of tp_testing::tp_config(64)
    std::string balance = "aux";           // --moe-balance (with cp > 1: bias or none)
    int64_t micro_batch = 2, grad_accum = 2, seq = 16;
    int n_layers = 2;
    std::string precision = "fp32";        // --precision (chapter 11 runs the layouts in low precision)
    std::string str() const;
    LlamaConfig config() const;
    TrainConfig train_config() const;
    FiveDFlags flags() const;
};

struct FiveDRun : penta::testing::Trained {
    ParamLayout layout;   // the one-rank layout params is in
    int ring_calls = 0;   // cp > 1: forward calls of the ring attention on this rank (it ran)
};

// steps of AdamW (clipping active) on tp_testing::RandomTokens on the whole world as L's grid, after
// check_5d_layout accepted L (fp16: with a loss scaler, as the programs' train loop adds one)
FiveDRun run_5d_layout(const FiveDLayout& L, int steps);
// run_5d_layout against one rank on the same global batch (dp · mb · ga sequences) under the same precision:
// losses, grad norms, final weights per tensor (equivalence.hpp: check_same_training)
void check_5d_trains_like_one_rank(const FiveDLayout& L, int steps, double rtol);

}  // namespace penta::five_d_testing
