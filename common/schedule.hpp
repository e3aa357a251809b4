// schedule.hpp — in which order a step's micro-batches run their forward and backward on this rank's
// slice of the model.
//
// A step is a schedule over micro-batches. On one stage (chapters 01-06, 08) the schedule is Sequential:
// forward then backward of each micro-batch in turn — gradient accumulation. Chapter 07 adds the pipeline
// schedules (AFAB, 1F1B, interleaved, zero bubble, DualPipe) as one more Schedule over the same model calls
// (Model::forward, backward_input, backward_weight), which also sends activations and their gradients to the
// neighbouring stages (07_pipeline_parallel/pipeline_executor.hpp).
//
// Playbook: "First steps: training on one GPU" (gradient accumulation), "Pipeline parallelism".
// Test: `make test CH=01` (tests/01_single_gpu/test_schedule.cpp).
#pragma once
#include <vector>

#include "model.hpp"

namespace penta {

struct StepHooks;

struct ScheduleResult {
    double loss = 0;      // sum over the micro-batches of Model::forward's loss (the head's stage's)
    double aux_loss = 0;  // sum of the MLP cores' auxiliary losses on this stage
    int64_t saved_activation_bytes = 0;  // what the first micro-batch's forward kept (Tag::activations + Tag::offloaded)
    int64_t first_non_finite = -1;  // the first micro-batch whose loss is a NaN or infinite (-1: none)
};

struct Schedule {
    virtual ~Schedule() = default;
    virtual const char* name() const = 0;
    // Runs every micro-batch's forward and backward on model (the gradients accumulate), telling hooks
    // before each micro-batch's weight gradients (before_gradients(i, last): before backward, or before
    // backward_weight when W is deferred). global_tokens: the loss's denominator.
    virtual ScheduleResult run(Model& model, std::vector<MicroBatch>& micro_batches, double global_tokens,
                               StepHooks& hooks) = 0;
};

// Forward then backward of each micro-batch in turn: gradient accumulation on one stage (chapter 01).
// Across several stages it is correct but idle most of the time — chapter 07's reason to exist.
struct Sequential : Schedule {
    const char* name() const override { return "sequential"; }
    ScheduleResult run(Model& model, std::vector<MicroBatch>& micro_batches, double global_tokens,
                       StepHooks& hooks) override;
};

}  // namespace penta
