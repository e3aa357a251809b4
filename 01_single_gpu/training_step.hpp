// training_step.hpp — one optimizer step: gradient accumulation over micro-batches, then clip + AdamW.
//
// Playbook: "First steps: training on one GPU" — "Gradient accumulation": the global batch of
// gbs = mbs × grad_acc sequences is processed as grad_acc micro-batches, each forward + backward adding its
// gradients into the same buffer, and the optimizer steps once. The loss of every micro-batch is divided
// by the token count of the WHOLE global batch, so the accumulated gradient is exactly the gradient of the
// mean loss over the global batch, whatever the split (tests/01_single_gpu/test_model.cpp checks 4×1 == 1×4).
// Later chapters call the same function: data parallelism gives each rank its own rows of the global
// batch and sums the token count and the loss over ranks (reduce_sum).
//   build/bin/01_single_gpu --micro-batch 2 --grad-accum 4   (the same training as --micro-batch 8)
#pragma once
#include <functional>

#include "../common/data.hpp"
#include "../common/model.hpp"
#include "../common/optim.hpp"

namespace penta {

struct BatchPlan {
    int64_t seq = 64;          // T
    int64_t micro_batch = 8;   // sequences per micro-batch on this rank
    int64_t grad_accum = 1;    // micro-batches per step on this rank
    int64_t global_batch = 8;  // sequences per step, all ranks together
    int64_t first_row = 0;     // this rank's first row inside the global batch
    // sums a value (the target-token count, the loss) over the ranks that share the global batch
    // (identity on one rank)
    std::function<double(double)> reduce_sum = [](double x) { return x; };
};

struct StepResult {
    double loss = 0;             // mean loss over the global batch's target tokens
    double grad_norm = 0;        // before clipping
    double global_tokens = 0;    // target tokens in the global batch (the loss's denominator)
    int64_t saved_activation_bytes = 0;  // what the first micro-batch's forward kept (Tag::activations)
};

// What a parallel layout adds to a step; these defaults are one device's. Chapter 02 (data parallel)
// overrides the gradient hooks, chapter 03 (ZeRO) the optimizer step too.
struct StepHooks {
    virtual ~StepHooks() = default;
    // before any micro-batch (gradients are zeroed by then)
    virtual void begin_step() {}
    // before micro-batch a's backward; last: it is the step's final one (DP's no_sync communicates only then)
    virtual void before_backward(int64_t a, bool last) {}
    // after the final backward: when it returns, every gradient this rank's optimizer reads is complete
    virtual void finish_gradients() {}
    // clip and update; returns the global gradient norm before clipping
    virtual double optimizer_step(float lr, float grad_clip) = 0;
};

// One device: the gradients are complete after backward; AdamW over the whole flat buffer.
struct SingleDeviceHooks : StepHooks {
    explicit SingleDeviceHooks(AdamW& optim) : optim(optim) {}
    double optimizer_step(float lr, float grad_clip) override { return optim.step(lr, grad_clip); }
    AdamW& optim;
};

// Zeroes the gradients, runs the micro-batches of `step` (0-based) and one optimizer step with lr.
StepResult training_step(Model& model, StepHooks& hooks, const Dataset& data, int64_t step, const BatchPlan& plan,
                         float lr, float grad_clip);
inline StepResult training_step(Model& model, AdamW& optim, const Dataset& data, int64_t step, const BatchPlan& plan,
                                float lr, float grad_clip) {
    SingleDeviceHooks hooks(optim);
    return training_step(model, hooks, data, step, plan, lr, grad_clip);
}

// The optimizer's view of the model: one range per parameter tensor, norm weights without weight decay.
std::vector<ParamRange> optimizer_ranges(const Model& model);

// Every row of `rows` as device tensors: tokens (rows T) and targets (rows T), i32.
struct DeviceBatch {
    Tensor tokens, targets;
};
DeviceBatch to_device(const Batch& b, int64_t first_row, int64_t rows, Device device);

}  // namespace penta
