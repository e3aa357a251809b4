// training_step.hpp — one optimizer step: the global batch cut into this rank's micro-batches, a schedule
// over them (gradient accumulation), the layout's hooks, then clip + AdamW.
//
// Playbook: "First steps: training on one GPU" — "Gradient accumulation": the global batch of
// gbs = mbs × grad_acc sequences is processed as grad_acc micro-batches, each forward + backward adding its
// gradients into the same buffer, and the optimizer steps once. The loss of every micro-batch is divided
// by the token count of the WHOLE global batch, so the accumulated gradient is exactly the gradient of the
// mean loss over the global batch, whatever the split (tests/01_single_gpu/test_model.cpp checks 4×1 == 1×4).
// Every chapter runs this same function. What a layout changes is data, not code:
//   - the BatchPlan: which rows of the global batch this rank reads, which tokens of each sequence it holds
//     (a SequenceSharder: context parallelism), and the group the token count and loss are summed over;
//   - the Trainer: the optimizer over what this rank updates, the hooks the layout adds (data parallelism,
//     ZeRO, ...), the schedule and the group of pipeline stages the loss is summed over (pipeline parallelism).
//   build/bin/01_single_gpu --micro-batch 2 --grad-accum 4   (the same training as --micro-batch 8)
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm.hpp"
#include "data.hpp"
#include "grid.hpp"
#include "model.hpp"
#include "optim.hpp"
#include "schedule.hpp"

namespace penta {

// Which tokens of every sequence this rank holds: all of them here; context parallelism (ch06) holds
// chunks. The model rotates and masks each token by the position it returns.
struct SequenceSharder {
    virtual ~SequenceSharder() = default;
    // positions in [0, T) of the tokens held of a T-token sequence, in the order they are held
    virtual std::vector<int32_t> positions(int64_t T) const;
    virtual std::string describe() const { return "whole sequences"; }
};

struct BatchPlan {
    int64_t seq = 64;          // T: tokens per sequence
    int64_t micro_batch = 8;   // sequences per micro-batch on this rank
    int64_t grad_accum = 1;    // micro-batches per step on this rank
    int64_t global_batch = 8;  // sequences per step, all ranks together
    int64_t first_row = 0;     // this rank's first row inside the global batch
    // the ranks that hold DIFFERENT tokens of the global batch (dp, or dp × cp): the target-token count and
    // the loss are sums over it. nullptr: this rank holds them all.
    Comm* batch_group = nullptr;
    std::shared_ptr<const SequenceSharder> sharder;  // nullptr: whole sequences
    double sum_over_batch(double x) const { return batch_group ? batch_group->all_reduce_scalar(x) : x; }
};

struct StepResult {
    double loss = 0;             // mean loss over the global batch's target tokens
    double aux_loss = 0;         // the MLP cores' auxiliary losses (MoE), summed like the loss; 0 dense
    double grad_norm = 0;        // before clipping
    double global_tokens = 0;    // target tokens in the global batch (the loss's denominator)
    int64_t saved_activation_bytes = 0;  // what the first micro-batch's forward kept (Tag::activations + Tag::offloaded)
    float loss_scale = 1;        // the scale this step's backward ran with (1: no loss scaling)
    bool skipped = false;        // a scaled gradient overflowed: no update this step (chapter 11's loss scaler)
};

// What a parallel layout adds to a step, in phases. A layout installs a LIST of hooks; every hook's method
// of a phase runs before any hook's method of the next phase, and within a phase the hooks own disjoint
// work, so their order in the list does not matter and no hook wraps another. The defaults do nothing.
struct StepHooks {
    virtual ~StepHooks() = default;
    // before any micro-batch (the model has zeroed its gradients by then)
    virtual void begin_step() {}
    // before micro-batch i writes its weight gradients: before its backward, or, when a schedule defers the
    // weight gradients (zero bubble), before its backward_weight; on a pipeline stage with several model chunks,
    // before each chunk's (i counts those passes). last: it is the step's final one on this rank (DP's
    // no_sync). A schedule finishes one pass's weight gradients before the next one's start: the data-parallel
    // hooks count a bucket's units per pass, and start at the end of the last what it did not complete.
    virtual void before_gradients(int64_t i, bool last) {}
    // after the final backward: finish this hook's gradient reductions (wait for what backward started)
    virtual void finish_gradients() {}
    // the gradients are final: prepare the optimizer's weights (ZeRO-1/2 stage this rank's shard)
    virtual void before_update() {}
    // after the optimizer step (ZeRO-1/2 all-gather the updated shards)
    virtual void after_update() {}
    // before the loop reads the full weights outside a step (evaluation, a checkpoint save, --export-hf,
    // --generate): a hook that leaves weights in flight after its step lands them (ZeRO-1's deferred gather)
    virtual void settle_weights() {}
    // fp16's loss scaling (chapter 11's LossScaler; no other hook scales): the factor S this step's loss
    // gradient is multiplied by (nullopt: this hook scales nothing), and, after backward, told whether every
    // gradient is finite, whether the step may update the weights (false: an overflow, the step is skipped)
    virtual std::optional<float> loss_scale() const { return std::nullopt; }
    virtual bool take_update(bool grads_finite) { return true; }
};

// Everything one optimizer step runs on this rank.
struct Trainer {
    Model& model;
    AdamW& optimizer;                 // over what this rank updates: the flat buffer, or a ZeRO shard
    std::vector<StepHooks*> hooks{};  // what the layout adds
    Schedule* schedule = nullptr;     // nullptr: Sequential
    Comm* stages = nullptr;           // the pipeline group, which sums the loss (the head's stage's) and the
                                      // aux losses (every stage's layers'); nullptr: one stage
};

// Zeroes the gradients, runs the micro-batches of `step` (0-based) and one optimizer step with lr.
StepResult training_step(Trainer& trainer, const Dataset& data, int64_t step, const BatchPlan& plan, float lr,
                         float grad_clip);
inline StepResult training_step(Model& model, AdamW& optim, const Dataset& data, int64_t step, const BatchPlan& plan,
                                float lr, float grad_clip) {
    Trainer t{model, optim};
    return training_step(t, data, step, plan, lr, grad_clip);
}

// The optimizer's view of the model: one range per parameter tensor, norm weights without weight decay.
// coords and optimizer_sharded decide which ranges this rank counts in the global gradient norm
// (counts_in_grad_norm); the defaults: one rank, which counts everything.
std::vector<ParamRange> optimizer_ranges(const ParamLayout& layout, const GridCoords& coords,
                                         Axes optimizer_sharded = 0);
std::vector<ParamRange> optimizer_ranges(const Model& model);
// AdamW over the model's whole flat buffers with the model's precision policy; the global norm counted by
// grid's coordinates and reduced over its world (nullptr: one rank)
std::unique_ptr<AdamW> make_adamw(Model& model, const AdamWConfig& cfg, ParallelGrid* grid = nullptr);

// This rank's micro-batches of one step: rows [first_row, first_row + micro_batch·grad_accum) of the
// global batch, the tokens the sharder holds of each, on `device`. held_targets: the non-ignored targets
// among them.
std::vector<MicroBatch> make_micro_batches(const Dataset& data, int64_t step, const BatchPlan& plan, Device device,
                                           int64_t* held_targets = nullptr);

// Every row of `rows` as device tensors: tokens (rows T) and targets (rows T), i32.
struct DeviceBatch {
    Tensor tokens, targets;
};
DeviceBatch to_device(const Batch& b, int64_t first_row, int64_t rows, Device device);

}  // namespace penta
