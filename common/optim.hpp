// optim.hpp — AdamW over flat parameter/gradient buffers, global grad-norm clipping, warmup + cosine LR.
//
// Playbook: "First steps: training on one GPU" (the optimizer step and its two fp32 moments, the 2Ψ+2Ψ
// of "Memory usage in Transformers") and "ZeRO": the optimizer only ever sees a flat parameter range and
// the gradient range of the same size, so the same class updates the full model (one rank, DP) or one
// rank's 1/N shard (ZeRO-1/2/3). Its moments m and v are allocated with Tag::optim, so the memory table
// shows them.
// With a precision policy of bf16 weights it steps an fp32 master copy (Tag::master) and writes the
// weights back rounded (playbook: "Mixed precision training"). The global gradient norm is one all-reduce
// of partial sums over the ranks, each counting the elements it owns (model_layout.hpp).
// Tested by tests/01_single_gpu/test_optim.cpp: `make test CH=01`.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "comm.hpp"
#include "ops.hpp"

namespace penta {

// A run of parameters with one weight-decay rule: matrices and embeddings decay, norm weights do not
// (decaying a norm gain towards 0 would fight the normalisation it exists for). in_norm: this rank counts
// the run in the global gradient norm (counts_in_grad_norm: of the ranks holding the same gradient values,
// exactly one does).
struct ParamRange {
    int64_t offset = 0, count = 0;  // elements, relative to the buffer the optimizer holds
    bool decay = true;
    bool in_norm = true;
    std::string name{};      // the parameter tensor it covers ("model.layers.0.self_attn.q_proj.weight"), for messages
    int64_t name_offset = 0;  // which element of that tensor (of this rank's part of it) the range starts at
};

// The part of `full` (ranges over the whole flat buffer) that falls inside [start, start + count),
// re-expressed relative to start: what a ZeRO rank owning that shard hands to its optimizer.
std::vector<ParamRange> ranges_in_shard(const std::vector<ParamRange>& full, int64_t start, int64_t count);

// Learning rate at optimizer step s (counting from 1, as AdamW does): linear warmup from 0 reaching
// max_lr at s = warmup (s gets max_lr·s/warmup), then cosine decay to min_lr at s = total, min_lr
// afterwards. Without warmup step 1 is the peak. A pure function of s, so a resumed run continues on the
// same curve.
struct LRSchedule {
    float max_lr = 3e-4f, min_lr = 3e-5f;
    int64_t warmup = 0, total = 1;
    float at(int64_t step) const;
};

class AdamW {
   public:
    // param: the weights it updates (the whole flat buffer, or one rank's shard of it), in the precision
    // policy's parameter dtype; grad: f32, same numel and device. ranges: disjoint, inside the buffer;
    // elements outside every range are not updated. Empty ranges: one decayed range over everything.
    // fp32_master: keep an f32 copy of the weights (Tag::master, initialised from param), step it, and
    // write it back rounded into param; required when param is not f32. cfg.trains false (--steps 0): none of
    // master, m and v is allocated, and update() refuses.
    // norm_group: the group whose ranks together hold every gradient once (the world, counted by the
    // ranges' in_norm); nullptr: this rank holds them all.
    AdamW(Tensor param, Tensor grad, std::vector<ParamRange> ranges, AdamWConfig cfg, bool fp32_master = false,
          Comm* norm_group = nullptr);

    // The global gradient norm (grad_norm), then clips to max_norm (<= 0: no clipping) and updates every
    // range with lr (update). Returns the norm BEFORE clipping, the number the step log prints.
    double step(float lr, float max_norm);
    // sum of grad^2 over the ranges this rank counts (in_norm), accumulated in double
    double local_sum_squares() const;
    // sqrt of local_sum_squares summed over norm_group: ONE all-reduce, whatever the layout
    double grad_norm();
    // one AdamW update of every range with the gradient scaled by grad_scale (the clipping factor)
    void update(float lr, float grad_scale);
    // The first element, in buffer order, of a range whose gradient is a NaN or an infinity: a full scan
    // (each range copied to the host), for when the cheap check (the norm) has fired. found = false: none.
    struct NonFinite {
        bool found = false;
        std::string name;     // the range's tensor ("" when the range has no name)
        int64_t element = 0;  // in that tensor (this rank's part of it)
        float value = 0;
    };
    NonFinite first_non_finite_grad() const;

    AdamWConfig cfg;
    int step_count = 0;  // optimizer steps taken; the next one uses step_count + 1 for bias correction
    Tensor param, grad;
    Tensor master;  // f32 copy of param when fp32_master (Tag::master), else undefined
    Tensor m, v;    // first and second moments, Tag::optim, same size as param
    Comm* norm_group = nullptr;
    int64_t norm_reductions = 0;  // all-reduces grad_norm made (one per step)
    const std::vector<ParamRange>& ranges() const { return ranges_; }

   private:
    std::vector<ParamRange> ranges_;
};

// the clipping factor: 1 when the norm is within max_norm (or max_norm <= 0)
float clip_scale(double grad_norm, float max_norm);

}  // namespace penta
