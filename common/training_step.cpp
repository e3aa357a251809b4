// training_step.cpp — see training_step.hpp.
// Playbook: "First steps: training on one GPU" (gradient accumulation). Test: `make test CH=01`.
#include "training_step.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "runtime.hpp"

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
    std::optional<float> loss_scale() const override {
        for (StepHooks* h : hooks)
            if (std::optional<float> s = h->loss_scale()) return s;
        return std::nullopt;
    }
    bool take_update(bool grads_finite) override {
        bool take = true;
        for (StepHooks* h : hooks) take = h->take_update(grads_finite) && take;  // every hook hears it
        return take;
    }
    const std::vector<StepHooks*>& hooks;
};

// The text of the lowest rank of `group` that has one ("" when no rank has), on every rank: a max-reduce
// picks the rank, a broadcast of a fixed 1 KiB buffer carries its text (i32, which both backends move).
std::string first_report(Comm& group, const std::string& mine, Device device) {
    const double best = group.all_reduce_scalar(mine.empty() ? 0.0 : (double)(group.size() - group.rank()),
                                                ReduceOp::max);
    if (best == 0.0) return "";
    const int root = group.size() - (int)best;
    std::vector<int32_t> buf(256, 0);
    if (group.rank() == root) std::memcpy(buf.data(), mine.data(), std::min<size_t>(mine.size(), 4 * buf.size() - 1));
    Tensor t = Tensor::from_host_i32(buf, {(int64_t)buf.size()}, device, Tag::comm);
    group.broadcast(t, root);
    buf = t.to_host_i32();
    const char* text = (const char*)buf.data();
    return std::string(text, strnlen(text, 4 * buf.size() - 1));
}

// A non-finite loss or gradient norm stops the run. Only now the full scan: which micro-batch's loss went
// non-finite and the first gradient element that is, on this rank (under ZeRO its shard, under TP its
// part); the lowest rank that found something tells every rank, so whichever rank's error reaches the
// terminal first names the micro-batch and the tensor.
[[noreturn]] void stop_non_finite(Trainer& t, int64_t step, const ScheduleResult& s, const StepResult& r) {
    std::string mine;
    if (s.first_non_finite >= 0)
        mine = strfmt("the loss of micro-batch %ld first became non-finite", (long)s.first_non_finite);
    const AdamW::NonFinite g = t.optimizer.first_non_finite_grad();
    if (g.found)
        mine += strfmt("%sthe first non-finite gradient is %s, element %ld of this rank's part: %g",
                       mine.empty() ? "" : "; ", g.name.empty() ? "(unnamed range)" : g.name.c_str(), (long)g.element,
                       g.value);
    if (!mine.empty()) mine = strfmt("on rank %d, ", world_rank()) + mine;
    Comm* group = t.optimizer.norm_group;  // every rank of the run (nullptr: this one alone)
    const std::string found = group && group->size() > 1 ? first_report(*group, mine, t.model.device()) : mine;
    FAIL("step %ld: the %s is not finite (loss %g, gradient norm %g): %s. The run stops here: lower --lr, lengthen "
         "--warmup or clip with --grad-clip",
         (long)step + 1, std::isfinite(r.loss) ? "gradient" : "loss", r.loss, r.grad_norm,
         found.empty() ? "no rank found a non-finite micro-batch loss or gradient element (a sum over ranks "
                         "overflowed?)"
                       : found.c_str());
}

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
        ranges.push_back({t.offset, t.numel(), t.decay, counts_in_grad_norm(t, coords, optimizer_sharded), t.name, 0});
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
    Schedule& schedule = t.schedule ? *t.schedule : sequential;
    // x summed over the pipeline's stages, on every stage: only the head's stage has a loss (DualPipe: two heads)
    auto over_stages = [&](double x) { return t.stages && t.stages->size() > 1 ? t.stages->all_reduce_scalar(x) : x; };
    HookList hooks(t.hooks);
    StepResult r;
    int64_t held = 0;
    std::vector<MicroBatch> mbs = make_micro_batches(data, step, plan, t.model.device(), &held);
    // the loss is a mean over the GLOBAL batch's target tokens: count them before any backward
    r.global_tokens = plan.sum_over_batch((double)held);
    CHECK(r.global_tokens > 0,
          "step %ld: no sample of the global batch has a target token (data %s, --seq %ld): a longer --seq is "
          "needed", (long)step, data.describe().c_str(), (long)plan.seq);

    // Loss scaling (chapter 11's LossScaler, one of the hooks): the model divides the loss by global_tokens / S,
    // so d loss / d logits, and every gradient after it, is S times the true one (S a power of two: exact until
    // something overflows). A MoE core's balance loss weighs each sequence by its tokens / global_tokens too, so
    // it and its gradient are S times theirs as well (tests_11 'loss scaling with a MoE balance loss')
    const std::optional<float> scale = hooks.loss_scale();
    CHECK(!t.model.precision().loss_scaling || scale, "precision %s: loss scaling needs chapter 11's LossScaler "
          "among the Trainer's hooks (11_mixed_precision/loss_scaler.hpp)", t.model.precision().str().c_str());
    if (scale) r.loss_scale = *scale;
    t.model.zero_grads();
    hooks.begin_step();
    const ScheduleResult s = schedule.run(t.model, mbs, r.global_tokens / r.loss_scale, hooks);
    hooks.finish_gradients();
    r.saved_activation_bytes = s.saved_activation_bytes;
    r.loss = plan.sum_over_batch(over_stages(s.loss)) / r.loss_scale;
    if (t.model.mlp().has_aux_loss())
        r.aux_loss = plan.sum_over_batch(over_stages(s.aux_loss)) / r.loss_scale;
    hooks.before_update();
    // AdamW::step, split so that the cheap check of every step (the loss, and the norm the optimizer
    // computes anyway; both are reduced, so every rank decides alike) runs before the update
    r.grad_norm = t.optimizer.grad_norm() / r.loss_scale;
    // an overflowed gradient under loss scaling is the scaler's business: skip, back off (every rank alike,
    // the norm is reduced over all of them); a non-finite loss is the model's and stops the run
    if (scale && std::isfinite(r.loss) && !hooks.take_update(std::isfinite(r.grad_norm))) {
        r.skipped = true;
        hooks.after_update();  // the weights did not change: ZeRO's gathers bring back what every rank holds
        return r;
    }
    if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) stop_non_finite(t, step, s, r);
    // unscaling is folded into the factor AdamW multiplies each gradient by, beside the clipping
    t.optimizer.update(lr, clip_scale(r.grad_norm, grad_clip) / r.loss_scale);
    hooks.after_update();
    return r;
}

}  // namespace penta
