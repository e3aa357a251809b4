// pp_testing.hpp — what chapter 07's training tests (and later chapters' layouts with pp) share: a runner that
// trains N steps in any dp × pp × tp (+sp, ZeRO-1/2) layout under any schedule with the program's own parts
// (pp_training.hpp: PipelineParts) and returns the losses, grad norms and the weights put together from every
// stage, and the check of such a run against one rank (ARCHITECTURE.md §6). Implemented in pp_testing.cpp.
// Playbook: "Pipeline parallelism". Run the tests that use it: `make test CH=07`.
#pragma once
#include <string>

#include "../../07_pipeline_parallel/pp_training.hpp"
#include "../04_tensor_parallel/tp_testing.hpp"

namespace penta::pp_testing {

struct PpLayout {
    int pp = 2, dp = 1, tp = 1;
    bool sp = false;
    int zero = 0;
    std::string schedule = "1f1b";
    int chunks = 1;
    std::string layers;  // --pp-layers; empty: even
    int64_t micro_batch = 2, grad_accum = 4;  // m = grad_accum micro-batches per dp rank
    int64_t seq = 8;
    Recompute recompute = Recompute::none;
    int n_layers = 4;     // of tp_testing::tp_config(64) (h 32, 4 heads, 4 kv heads)
    bool tied = false;    // that config tied
    bool small = false;   // the `small` preset instead (tied, 4 layers, vocab 256)
    std::string str() const;
    LlamaConfig config() const;
};

struct PpRun : penta::testing::Trained {
    std::vector<std::vector<float>> grads;  // per step, this rank's gradient buffer before the update (its own layout)
    int replicas_checked = 0;  // tensors this rank holds as a copy of another stage's, found equal bit for bit
    int weight_ops = 0;        // ops of this stage's list that wrote weight gradients (per step)
    // without ZeRO, dp > 1: what the data-parallel hooks sent in the last step, and one ring all-reduce of this
    // stage's gradient buffer (2(K-1)/K · M): no_sync reduces once per step, after the last micro-batch
    double dp_bytes = 0, dp_once = 0;
    // the executor's record of the last step on this stage: the ops it ran (the plan's list, in order), the most
    // micro-batch chunks held between F and W, the most Tag::activations above the step's start, and what the
    // first forward of chunk 0 kept
    bool ran_the_list = false;
    int peak_in_flight = 0;
    int64_t peak_activations = 0, forward_bytes = 0;
    int stage = 0;
    // bytes this stage sent in the last step: on the pipeline group (activations on, gradients back) and on the
    // mirror pair (the sum of the tensors two stages hold: a tied table, DualPipe's copies)
    double sent_bytes = 0, pair_bytes = 0;
    int64_t stage_numel = 0;  // this rank's parameters (its stage, its tp shard)
};

// steps of AdamW (clipping active) on tp_testing::RandomTokens, on a grid of dp × pp × tp ranks (the whole
// world), trained with PipelineParts; the weights of every stage are put together into the unsharded layout on
// every rank, and each replica (a tied table's, DualPipe's mirror copies) is checked to equal its original
PpRun run_pp_layout(const PpLayout& layout, int steps, bool keep_grads = false);

// run_pp_layout against one rank training the same global batch (dp·mb·ga sequences as one micro-batch):
// losses and grad norms per step within rtol, final weights per tensor (equivalence.hpp); the plan's list ran,
// the micro-batches in flight and each stage sent in a step equal their closed forms; returns the run
PpRun check_pp_trains_like_one_rank(const PpLayout& layout, int steps, double rtol);

}  // namespace penta::pp_testing
