// optim.hpp — AdamW over flat parameter/gradient buffers, global grad-norm clipping, warmup + cosine LR.
//
// Playbook: "First steps: training on one GPU" (the optimizer step and its two fp32 moments, the 2Ψ+2Ψ
// of "Memory usage in Transformers") and "ZeRO": the optimizer only ever sees a flat parameter range and
// the gradient range of the same size, so the same class updates the full model (one rank, DP) or one
// rank's 1/N shard (ZeRO-1/2/3). Its moments m and v are allocated with Tag::optim, so the memory table
// shows them.
// Tested by tests/01_single_gpu/test_optim.cpp: `build/bin/tests_01 -ts='ch01 np1' -tc='*AdamW*,*clip*,*LR*'`.
#pragma once
#include <functional>
#include <vector>

#include "ops.hpp"

namespace penta {

// A run of parameters with one weight-decay rule: matrices and embeddings decay, norm weights do not
// (decaying a norm gain towards 0 would fight the normalisation it exists for).
struct ParamRange {
    int64_t offset = 0, count = 0;  // elements, relative to the buffer the optimizer holds
    bool decay = true;
};

// The part of `full` (ranges over the whole flat buffer) that falls inside [start, start + count),
// re-expressed relative to start: what a ZeRO rank owning that shard hands to its optimizer.
std::vector<ParamRange> ranges_in_shard(const std::vector<ParamRange>& full, int64_t start, int64_t count);

// Learning rate at optimizer step s (counting from 1, as AdamW does): linear warmup from 0 reaching
// max_lr at s = warmup, then cosine decay to min_lr at s = total, min_lr afterwards. A pure function of s,
// so a resumed run continues on the same curve.
struct LRSchedule {
    float max_lr = 3e-4f, min_lr = 3e-5f;
    int64_t warmup = 0, total = 1;
    float at(int64_t step) const;
};

class AdamW {
   public:
    // param, grad: f32, same numel and device (the whole flat buffer, or one rank's shard of it).
    // ranges: disjoint, inside the buffer; elements outside every range are not updated.
    // Empty ranges: one decayed range over everything.
    AdamW(Tensor param, Tensor grad, std::vector<ParamRange> ranges, AdamWConfig cfg);

    // Sum over the ranges of this rank's grad^2 -> reduce (sum over the ranks that hold other shards;
    // identity when this rank holds every gradient) -> sqrt. Clips to max_norm (<= 0: no clipping) by
    // passing min(1, max_norm / (norm + 1e-6)) as adamw_step's grad_scale, then updates every range with
    // lr. Returns the norm BEFORE clipping, the number the step log prints.
    double step(float lr, float max_norm);

    // the global gradient norm as step() computes it, without updating anything
    double grad_norm() const;

    std::function<double(double)> reduce_sum_squares = [](double s) { return s; };
    AdamWConfig cfg;
    int step_count = 0;  // optimizer steps taken; the next one uses step_count + 1 for bias correction
    Tensor param, grad;
    Tensor m, v;  // first and second moments, Tag::optim, same size as param
    const std::vector<ParamRange>& ranges() const { return ranges_; }

   private:
    std::vector<ParamRange> ranges_;
};

// the clipping factor: 1 when the norm is within max_norm (or max_norm <= 0)
float clip_scale(double grad_norm, float max_norm);

}  // namespace penta
