// optim.cpp — AdamW over parameter ranges, global grad-norm clipping and the LR schedule (optim.hpp).
//
// Playbook: "First steps: training on one GPU" and "ZeRO" (the optimizer works on a shard as well).
// Tested by tests/01_single_gpu/test_optim.cpp: `build/bin/tests_01 -ts='ch01 np1'`.
#include "optim.hpp"

#include <algorithm>
#include <cmath>

namespace penta {

std::vector<ParamRange> ranges_in_shard(const std::vector<ParamRange>& full, int64_t start, int64_t count) {
    std::vector<ParamRange> out;
    for (const auto& r : full) {
        int64_t lo = std::max(r.offset, start), hi = std::min(r.offset + r.count, start + count);
        if (lo < hi) out.push_back(ParamRange{lo - start, hi - lo, r.decay, r.in_norm, r.name, r.name_offset + lo - r.offset});
    }
    return out;
}

float LRSchedule::at(int64_t step) const {
    CHECK(warmup >= 0 && total > warmup, "LR schedule: warmup %ld must be >= 0 and < total steps %ld",
          (long)warmup, (long)total);
    // EXERCISE 01.1 begin: the learning-rate schedule: linear warmup from 0, then a cosine from max_lr down to min_lr
    if (step < warmup) return max_lr * (float)std::max<int64_t>(step, 0) / (float)warmup;
    // The cosine starts at the peak on step `peak`. Steps count from 1 (AdamW's count, what the train loop
    // passes), so without warmup the peak is step 1: measured from step 0, step 1 would already be past the
    // peak and max_lr never used. With warmup, step `warmup` is the peak, exactly as before. A one-step run
    // without warmup takes its one step at the peak.
    const int64_t peak = std::max<int64_t>(warmup, 1);
    if (step > peak && step >= total) return min_lr;
    double progress = step <= peak ? 0.0 : (double)(step - peak) / (double)(total - peak);  // 0 -> 1
    return (float)(min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * progress)));
    // EXERCISE 01.1 end
}

float clip_scale(double grad_norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    return (float)std::min(1.0, (double)max_norm / (grad_norm + 1e-6));
}

AdamW::AdamW(Tensor param_, Tensor grad_, std::vector<ParamRange> ranges, AdamWConfig cfg_, bool fp32_master,
             Comm* norm_group_)
    : cfg(cfg_), param(std::move(param_)), grad(std::move(grad_)), norm_group(norm_group_), ranges_(std::move(ranges)) {
    CHECK(grad.dtype == DType::f32, "AdamW: gradients must be f32, got %s", dtype_name(grad.dtype));
    CHECK(param.dtype == DType::f32 || fp32_master,
          "AdamW: %s parameters need an fp32 master copy (fp32_master): the update is computed in f32",
          dtype_name(param.dtype));
    CHECK(param.numel() == grad.numel(), "AdamW: %ld parameters but %ld gradients", (long)param.numel(),
          (long)grad.numel());
    CHECK(param.device() == grad.device(), "AdamW: params on %s, grads on %s", device_name(param.device()),
          device_name(grad.device()));
    const int64_t n = param.numel();
    if (ranges_.empty()) ranges_.push_back(ParamRange{0, n, true});
    std::vector<ParamRange> sorted = ranges_;
    std::sort(sorted.begin(), sorted.end(),
              [](const ParamRange& a, const ParamRange& b) { return a.offset < b.offset; });
    for (size_t i = 0; i < sorted.size(); i++) {
        const auto& r = sorted[i];
        CHECK(r.offset >= 0 && r.count >= 0 && r.offset + r.count <= n,
              "AdamW: range [%ld, %ld) is outside the %ld-element buffer", (long)r.offset, (long)(r.offset + r.count),
              (long)n);
        CHECK(i == 0 || sorted[i - 1].offset + sorted[i - 1].count <= r.offset,
              "AdamW: ranges [%ld, +%ld) and [%ld, +%ld) overlap", (long)sorted[i - 1].offset,
              (long)sorted[i - 1].count, (long)r.offset, (long)r.count);
    }
    if (!cfg.trains) return;  // nothing will be updated: no state to keep
    if (fp32_master) {
        master = Tensor::empty({n}, DType::f32, param.device(), Tag::master);
        if (param.dtype == DType::f32) copy(master, param);
        else convert(master, param);  // the weights as they are now, exactly (bf16 -> f32 is exact)
    }
    m = Tensor::zeros({n}, DType::f32, param.device(), Tag::optim);
    v = Tensor::zeros({n}, DType::f32, param.device(), Tag::optim);
}

double AdamW::local_sum_squares() const {
    std::vector<Tensor> counted;  // summed in this order, as one call: on a GPU one wait, not one per tensor
    for (const auto& r : ranges_)
        if (r.in_norm) counted.push_back(grad.flat(r.offset, r.count));
    return sum_squares(counted);
}

double AdamW::grad_norm() {
    double sum = local_sum_squares();
    if (norm_group) {
        sum = norm_group->all_reduce_scalar(sum);
        norm_reductions++;
    }
    return std::sqrt(sum);
}

void AdamW::update(float lr, float grad_scale) {
    CHECK(cfg.trains, "AdamW: built for a run that does not train (--steps 0: no moments allocated), asked to step");
    step_count++;
    for (const auto& r : ranges_) {
        AdamWConfig c = cfg;
        c.lr = lr;
        if (!r.decay) c.weight_decay = 0.0f;
        Tensor p = param.flat(r.offset, r.count), g = grad.flat(r.offset, r.count);
        Tensor mr = m.flat(r.offset, r.count), vr = v.flat(r.offset, r.count);
        if (!master.defined()) {
            adamw_step(p, g, mr, vr, c, step_count, grad_scale);
            continue;
        }
        Tensor w = master.flat(r.offset, r.count);
        adamw_step(w, g, mr, vr, c, step_count, grad_scale);  // the fp32 master takes the step
        if (p.dtype == DType::f32) copy(p, w);
        else convert(p, w);  // and the weights the model reads are its rounding
    }
}

AdamW::NonFinite AdamW::first_non_finite_grad() const {
    std::vector<const ParamRange*> order;
    for (const auto& r : ranges_) order.push_back(&r);
    std::sort(order.begin(), order.end(), [](const ParamRange* a, const ParamRange* b) { return a->offset < b->offset; });
    for (const ParamRange* r : order) {
        const std::vector<float> g = grad.flat(r->offset, r->count).to_host();
        for (int64_t i = 0; i < r->count; i++)
            if (!std::isfinite(g[i])) return NonFinite{true, r->name, r->name_offset + i, g[i]};
    }
    return {};
}

double AdamW::step(float lr, float max_norm) {
    const double norm = grad_norm();
    CHECK(std::isfinite(norm),
          "AdamW: gradient norm is %f at step %d (the run diverged: lower the learning rate or clip the grad norm)",
          norm, step_count + 1);
    update(lr, clip_scale(norm, max_norm));
    return norm;
}

}  // namespace penta
