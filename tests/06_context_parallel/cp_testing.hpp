// cp_testing.hpp — what chapter 06's training tests (and later chapters' layouts with cp) share: a runner that
// trains N steps in any dp × cp × tp (+sp, ZeRO-0..3) layout with the program's own pieces (cp_training.hpp)
// and returns the losses, grad norms and gathered weights, and the check of such a run against one rank
// (ARCHITECTURE.md §6). Implemented in cp_testing.cpp.
// Playbook: "Context parallelism". Run the tests that use it: `make test CH=06`.
#pragma once
#include <string>

#include "../../06_context_parallel/ring_attention.hpp"
#include "../04_tensor_parallel/tp_testing.hpp"

namespace penta::cp_testing {

struct CpLayout {
    int dp = 1, cp = 2, tp = 1;
    bool sp = false;
    int zero = 0;
    CpShard shard = CpShard::zigzag;
    CpAttn attn = CpAttn::ring;
    int64_t micro_batch = 2, grad_accum = 1;  // per dp rank
    int64_t seq = 16;
    Recompute recompute = Recompute::none;
    std::string str() const;
};

struct CpRun : penta::testing::Trained {
    int64_t saved_activation_bytes = 0;  // what the first step's first micro-batch's forward kept
    CpAttentionStats stats;              // the attention kernel's, over the run
};

// steps of AdamW (clipping active) on tp_testing::RandomTokens with tp_testing::tp_config(64), on a grid of
// dp × cp × tp ranks (the whole world), built as the program builds them: the CP attention core, the plan
// over dp × cp, make_cp_optimizer; f/g (or SP's boundary) and the vocab-parallel loss when tp > 1
CpRun run_cp_layout(const CpLayout& layout, int steps);

// run_cp_layout against one rank training the same global batch (dp·mb·ga sequences of seq tokens, one
// micro-batch): losses and grad norms per step within rtol, final weights per tensor (equivalence.hpp)
void check_cp_trains_like_one_rank(const CpLayout& layout, int steps, double rtol);

}  // namespace penta::cp_testing
