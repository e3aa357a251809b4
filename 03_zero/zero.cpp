// zero.cpp — ZeRO-1/2/3 step hooks (zero.hpp). Read begin_step → finish_gradients → before_update →
// after_update: the communication of each stage is in those functions and in the seams they install on
// the model.
// Playbook: "Zero Redundancy Optimizer (ZeRO)". Run: `mpirun -np 4 build/bin/03_zero --dp 4 --zero 3`.
#include "zero.hpp"

#include "../common/ops.hpp"

namespace penta {

ZeroStage parse_zero_stage(int64_t v) {
    CHECK(v >= 1 && v <= 3, "--zero %lld must be 1, 2 or 3 (0: plain data parallelism)", (long long)v);
    return (ZeroStage)v;
}

ModelOptions zero_model_options(ZeroStage stage, ModelOptions base) {
    base.resident_grads = stage == ZeroStage::zero1;
    base.resident_params = stage != ZeroStage::zero3;
    return base;
}

ZeroHooks::ZeroHooks(Model& model, ReduceGroups groups, ZeroStage stage, AdamWConfig cfg, ParallelGrid* grid,
                     Axes dp_axes)
    : model_(model), groups_(groups), stage_(stage), shards_(model.layout(), groups_) {  // each unit over its group
    Comm& dp = groups_.data();
    const ModelOptions want = zero_model_options(stage, model.options());
    CHECK(model.options().resident_params == want.resident_params &&
              model.options().resident_grads == want.resident_grads,
          "ZeRO-%d needs a model built with zero_model_options(stage): full weights %s, full gradients %s",
          (int)stage, want.resident_params ? "yes" : "no", want.resident_grads ? "yes" : "no");
    const Device dev = model.device();
    const Precision& pr = model.precision();
    const int64_t S = shards_.numel();
    Tensor p;  // the weights the optimizer starts from: its master copy (if any) is made of them
    if (stage_ == ZeroStage::zero3) {
        param_shard_ = Tensor::empty({S}, pr.param, dev, Tag::params);  // (S) the only copy of my weights
        shards_.init([&model](const ParamLayout& l, Tensor& t) { model.initial_weights(l, t); }, param_shard_);
        gathered_ = std::make_unique<GatheredParams>(shards_, groups_, param_shard_);
        model.set_param_provider(gathered_.get());
        p = param_shard_;
    } else {
        p = Tensor::empty({S}, pr.param, dev, Tag::comm);  // (S) staged anew each step
        shards_.copy_from_full(model.params(), p);
    }
    if (stage_ != ZeroStage::zero1) {
        grad_shard_ = Tensor::zeros({S}, pr.grad, dev, Tag::grads);  // (S)
        sink_ = std::make_unique<ShardedGradients>(shards_, groups_, grad_shard_);
        model.set_gradient_sink(sink_.get());
    }
    // AdamW over the shard: its moments are 2 × S elements (Tag::optim). ZeRO-1 hands it the reduced
    // gradients anew each step, so those start as a placeholder. The global norm: each rank counts its
    // shard (dp shards the optimizer's buffer) once per tp group, one all-reduce over every rank.
    const GridCoords coords = grid ? grid->coords() : GridCoords{dp.rank()};
    Tensor g = grad_shard_.defined() ? grad_shard_ : Tensor::empty({S}, pr.grad, dev, Tag::comm);
    optim_ = std::make_unique<AdamW>(p, g, shards_.shard_ranges(optimizer_ranges(model.layout(), coords, dp_axes)),
                                     cfg, pr.fp32_master, grid ? &grid->world() : &dp);
    if (!param_shard_.defined()) optim_->param = Tensor();
    if (!grad_shard_.defined()) optim_->grad = Tensor();
}

ZeroHooks::~ZeroHooks() {
    if (deferred_) {
        deferred_->finish_all();
        model_.set_param_provider(nullptr);
    }
    if (gathered_) model_.set_param_provider(nullptr);
    if (sink_) model_.set_gradient_sink(nullptr);
}

void ZeroHooks::begin_step() {
    at_begin_ = groups_.counters();
    if (stage_ == ZeroStage::zero1) optim_->grad = Tensor();  // a reduced buffer left by a pass outside a step
    if (grad_shard_.defined()) fill(grad_shard_, 0.0f);  // ZeRO-2/3 accumulate here; ZeRO-1's model zeroed its own
}

void ZeroHooks::finish_gradients() {
    if (sink_) {  // ZeRO-2/3: the per-unit reduce-scatters were started during backward
        sink_->wait_all();
        return;
    }
    // ZeRO-1: the full gradients are summed over ranks only where this rank needs them: its shard
    Tensor reduced = Tensor::empty({shards_.numel()}, model_.grads().dtype, model_.device(), Tag::comm);  // (S)
    shards_.reduce_scatter(groups_, model_.grads(), reduced);
    optim_->grad = reduced;
}

void ZeroHooks::before_update() {
    if (stage_ == ZeroStage::zero3) {
        CHECK(gathered_->idle(), "ZeRO-3: units still gathered at the optimizer step");
        return;  // AdamW updates the shard in place; forward gathers it next step
    }
    if (deferred_) deferred_->finish_all();  // the last step's gathers: AdamW overwrites what they wrote
    // ZeRO-1/2: the optimizer updates my pieces of the full weights (from the master copy when there is one,
    // which makes the staged weights write-only)
    Tensor staged = Tensor::empty({shards_.numel()}, model_.params().dtype, model_.device(), Tag::comm);  // (S)
    if (!optim_->master.defined()) shards_.copy_from_full(model_.params(), staged);
    optim_->param = staged;
}

void ZeroHooks::after_update() {
    if (stage_ != ZeroStage::zero3) {  // give every rank everyone's updated pieces
        if (deferred_) {
            deferred_->start(groups_, optim_->param);  // waited for unit by unit in the next forward
        } else {
            std::vector<CommHandle> inflight = shards_.all_gather_start(groups_, optim_->param, model_.params());
            for (CommHandle& h : inflight) waits_.wait(h);  // all at once: they overlap each other, not compute
        }
        optim_->param = Tensor();
        if (stage_ == ZeroStage::zero1) optim_->grad = Tensor();
    }
    last_step_ = groups_.counters() - at_begin_;
}

Tensor ZeroHooks::gather_params() {
    if (deferred_) deferred_->finish_all();
    if (stage_ != ZeroStage::zero3) return model_.params().clone(model_.device(), Tag::workspace);
    Tensor full = Tensor::empty({model_.n_params()}, param_shard_.dtype, model_.device(), Tag::workspace);
    shards_.all_gather(groups_, param_shard_, full);
    return full;
}

void ZeroHooks::finish_weight_gather() {
    if (deferred_) deferred_->finish_all();
}

void ZeroHooks::defer_weight_gather() {
    CHECK(stage_ != ZeroStage::zero3, "ZeRO-3 has no weight all-gather after the step to defer (it gathers per unit)");
    if (!deferred_) deferred_ = std::make_unique<DeferredWeights>(model_, shards_);
    model_.set_param_provider(deferred_.get());
}

}  // namespace penta
