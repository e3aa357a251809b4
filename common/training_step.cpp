// training_step.cpp — see training_step.hpp.
// Playbook: "First steps: training on one GPU" (gradient accumulation). Test: `make test CH=01`.
#include "training_step.hpp"

#include <numeric>

namespace penta {

namespace {

// The phases of StepHooks over a list of hooks: each phase runs on every hook before the next phase.
struct HookList : StepHooks {
    explicit HookList(const std::vector<StepHooks*>& hooks) : hooks(hooks) {}
    void begin_step() override {
        for (StepHooks* h : hooks) h->begin_step();
    }
    void before_gradients(int64_t i, bool last) override {
        for (StepHooks* h : hooks) h->before_gradients(i, last);
    }
    void finish_gradients() override {
        for (StepHooks* h : hooks) h->finish_gradients();
    }
    void before_update() override {
        for (StepHooks* h : hooks) h->before_update();
    }
    void after_update() override {
        for (StepHooks* h : hooks) h->after_update();
    }
    const std::vector<StepHooks*>& hooks;
};

}  // namespace

std::vector<int32_t> SequenceSharder::positions(int64_t T) const {
    std::vector<int32_t> p(T);
    std::iota(p.begin(), p.end(), 0);
    return p;
}

DeviceBatch to_device(const Batch& b, int64_t first_row, int64_t rows, Device device) {
    int64_t n = rows * b.T, start = first_row * b.T;
    std::vector<int32_t> tok(b.tokens.begin() + start, b.tokens.begin() + start + n);
    std::vector<int32_t> tgt(b.targets.begin() + start, b.targets.begin() + start + n);
    return {Tensor::from_host_i32(tok, {n}, device, Tag::workspace),
            Tensor::from_host_i32(tgt, {n}, device, Tag::workspace)};
}

std::vector<ParamRange> optimizer_ranges(const ParamLayout& layout, const GridCoords& coords, Axes optimizer_sharded) {
    std::vector<ParamRange> ranges;
    for (const ParamTensor& t : layout.tensors)
        ranges.push_back({t.offset, t.numel(), t.decay, counts_in_grad_norm(t, coords, optimizer_sharded)});
    return ranges;
}

std::vector<ParamRange> optimizer_ranges(const Model& model) { return optimizer_ranges(model.layout(), GridCoords{}); }

std::unique_ptr<AdamW> make_adamw(Model& model, const AdamWConfig& cfg, ParallelGrid* grid) {
    const GridCoords coords = grid ? grid->coords() : GridCoords{};
    return std::make_unique<AdamW>(model.params(), model.grads(), optimizer_ranges(model.layout(), coords), cfg,
                                   model.precision().fp32_master, grid ? &grid->world() : nullptr);
}

std::vector<MicroBatch> make_micro_batches(const Dataset& data, int64_t step, const BatchPlan& plan, Device device,
                                           int64_t* held_targets) {
    const int64_t rows = plan.micro_batch * plan.grad_accum;  // this rank's share of the global batch
    const Batch batch = load_batch(data, global_sample_id(step, plan.first_row, plan.global_batch), rows, plan.seq);
    const std::vector<int32_t> pos = plan.sharder ? plan.sharder->positions(plan.seq) : SequenceSharder().positions(plan.seq);
    const int64_t T = (int64_t)pos.size(), n = plan.micro_batch * T;
    CHECK(T > 0, "the sharder holds no token of a %ld-token sequence", (long)plan.seq);
    const Tensor positions = Tensor::from_host_i32(pos, {T}, device, Tag::workspace);  // (T)
    std::vector<MicroBatch> mbs;
    int64_t targets = 0;
    for (int64_t a = 0; a < plan.grad_accum; a++) {
        std::vector<int32_t> tok(n), tgt(n);  // (micro_batch, T): the held tokens of each row
        for (int64_t b = 0; b < plan.micro_batch; b++)
            for (int64_t t = 0; t < T; t++) {
                const int64_t src = (a * plan.micro_batch + b) * plan.seq + pos[t];
                tok[b * T + t] = batch.tokens[src];
                tgt[b * T + t] = batch.targets[src];
                targets += batch.targets[src] != kIgnoreTarget;
            }
        MicroBatch mb;
        mb.index = a, mb.B = plan.micro_batch, mb.T = T;
        mb.tokens = Tensor::from_host_i32(tok, {n}, device, Tag::workspace);
        mb.targets = Tensor::from_host_i32(tgt, {n}, device, Tag::workspace);
        mb.positions = positions;
        mbs.push_back(std::move(mb));
    }
    if (held_targets) *held_targets = targets;
    return mbs;
}

StepResult training_step(Trainer& t, const Dataset& data, int64_t step, const BatchPlan& plan, float lr,
                         float grad_clip) {
    static Sequential sequential;
    static StageLink one_stage;
    Schedule& schedule = t.schedule ? *t.schedule : sequential;
    StageLink& link = t.link ? *t.link : one_stage;
    HookList hooks(t.hooks);
    StepResult r;
    int64_t held = 0;
    std::vector<MicroBatch> mbs = make_micro_batches(data, step, plan, t.model.device(), &held);
    // the loss is a mean over the GLOBAL batch's target tokens: count them before any backward
    r.global_tokens = plan.sum_over_batch((double)held);
    CHECK(r.global_tokens > 0,
          "step %ld: no sample of the global batch has a target token (data %s, --seq %ld): a longer --seq is "
          "needed", (long)step, data.describe().c_str(), (long)plan.seq);

    t.model.zero_grads();
    hooks.begin_step();
    const ScheduleResult s = schedule.run(t.model, mbs, r.global_tokens, link, hooks);
    hooks.finish_gradients();
    r.saved_activation_bytes = s.saved_activation_bytes;
    r.loss = plan.sum_over_batch(link.share_loss(s.loss));
    if (t.model.mlp().has_aux_loss()) r.aux_loss = plan.sum_over_batch(link.sum_over_stages(s.aux_loss));
    hooks.before_update();
    r.grad_norm = t.optimizer.step(lr, grad_clip);
    hooks.after_update();
    return r;
}

}  // namespace penta
