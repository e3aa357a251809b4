// training_step.cpp — see training_step.hpp.
// Playbook: "First steps: training on one GPU" (gradient accumulation). Test: `build/bin/tests_01 -ts='ch01 np1'`.
#include "training_step.hpp"

namespace penta {

DeviceBatch to_device(const Batch& b, int64_t first_row, int64_t rows, Device device) {
    int64_t n = rows * b.T, start = first_row * b.T;
    std::vector<int32_t> tok(b.tokens.begin() + start, b.tokens.begin() + start + n);
    std::vector<int32_t> tgt(b.targets.begin() + start, b.targets.begin() + start + n);
    return {Tensor::from_host_i32(tok, {n}, device, Tag::workspace),
            Tensor::from_host_i32(tgt, {n}, device, Tag::workspace)};
}

std::vector<ParamRange> optimizer_ranges(const Model& model) {
    std::vector<ParamRange> ranges;
    for (const ParamTensor& t : model.tensors()) ranges.push_back({t.offset, t.numel(), t.decay});
    return ranges;
}

StepResult training_step(Model& model, StepHooks& hooks, const Dataset& data, int64_t step, const BatchPlan& plan,
                         float lr, float grad_clip) {
    StepResult r;
    int64_t rows = plan.micro_batch * plan.grad_accum;  // this rank's share of the global batch
    Batch batch = load_batch(data, global_sample_id(step, plan.first_row, plan.global_batch), rows, plan.seq);
    // the loss is a mean over the GLOBAL batch's target tokens: count them before any backward
    r.global_tokens = plan.reduce_sum((double)count_targets(batch));
    CHECK(r.global_tokens > 0,
          "step %ld: no sample of the global batch has a target token (data %s, --seq %ld): a longer --seq is "
          "needed", (long)step, data.describe().c_str(), (long)plan.seq);

    model.zero_grads();
    hooks.begin_step();
    double loss = 0;
    for (int64_t a = 0; a < plan.grad_accum; a++) {
        DeviceBatch mb = to_device(batch, a * plan.micro_batch, plan.micro_batch, model.device());
        int64_t before = mem_stats(model.device()).current[(int)Tag::activations];
        MicroBatchActs acts = model.forward(mb.tokens, mb.targets, plan.micro_batch, plan.seq, r.global_tokens);
        if (a == 0) r.saved_activation_bytes = mem_stats(model.device()).current[(int)Tag::activations] - before;
        loss += acts.loss;
        hooks.before_backward(a, a + 1 == plan.grad_accum);
        model.backward(acts);  // gradients accumulate into model.grads() (or the layout's gradient sink)
    }
    hooks.finish_gradients();
    r.loss = plan.reduce_sum(loss);
    r.grad_norm = hooks.optimizer_step(lr, grad_clip);
    return r;
}

}  // namespace penta
