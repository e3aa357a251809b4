// data_parallel.cpp — naive and bucketed data parallelism, no_sync; see data_parallel.hpp.
//
// Playbook: "Data parallelism" (first optimisation: overlap the all-reduce with backward; second:
// bucketing; third: interplay with gradient accumulation). Run:
//   mpirun -np 2 build/bin/02_data_parallel --dp 2 --dp-mode naive
//   mpirun -np 2 build/bin/tests_02 -ts='ch02 np2' -tc='*data parallel*'
#include "data_parallel.hpp"

#include <chrono>
#include <limits>

#include "../common/metrics.hpp"     // Timer
#include "../common/train_loop.hpp"  // batch_plan

namespace penta {

DpMode parse_dp_mode(const std::string& v) {
    if (v == "naive") return DpMode::naive;
    CHECK(v == "bucketed", "--dp-mode %s must be naive or bucketed", v.c_str());
    return DpMode::bucketed;
}

const char* dp_mode_name(DpMode m) { return m == DpMode::naive ? "naive" : "bucketed"; }

void check_data_parallel_only(const TrainConfig& cfg, int world_size, const char* chapter) {
    // the rule first: with --tp 2 on 2 ranks, "pass --dp 2" would be the wrong advice
    CHECK(cfg.tp == 1 && cfg.pp == 1 && cfg.cp == 1 && cfg.ep == 1 && !cfg.sp,
          "%s is data parallel only: --tp %ld --pp %ld --cp %ld --ep %ld%s, but each must be 1 and --sp off (tensor "
          "parallelism is chapter 04, sequence parallelism chapter 05)",
          chapter, (long)cfg.tp, (long)cfg.pp, (long)cfg.cp, (long)cfg.ep, cfg.sp ? " --sp" : "");
    CHECK(cfg.dp == world_size,
          "--dp %ld must equal the number of ranks %d (%s is data parallel only): pass --dp %d, or run mpirun -np %ld",
          (long)cfg.dp, world_size, chapter, world_size, (long)cfg.dp);
}

BatchPlan data_parallel_plan(const TrainConfig& cfg, Comm& dp) {
    BatchPlan p = batch_plan(cfg);  // this rank's share, as on one device
    p.global_batch *= dp.size();
    p.first_row = dp.rank() * cfg.micro_batch * cfg.grad_accum;
    p.batch_group = &dp;
    return p;
}

double dp_bytes_per_step_formula(int K, double gradient_bytes) { return 2.0 * (K - 1) / K * gradient_bytes; }

std::vector<GradBucket> plan_buckets(const ParamLayout& layout, double bucket_mb, int64_t bytes_per_element,
                                     const ReduceGroups* groups) {
    // EXERCISE 02.2 begin: plan the gradient buckets: walk the units in backward order, cut a bucket at about bucket_mb and at a change of group
    const double cap = bucket_mb * 1024 * 1024;
    std::vector<GradBucket> buckets;
    bool open = false;
    // backward finishes the head first and the embedding last: walk the units in that order
    for (int u = layout.head_unit(); u >= 0; u--) {
        const ParamUnit& unit = layout.units[u];
        if (!unit.present() || unit.numel == 0) continue;
        Comm* group = groups ? &groups->of(unit) : nullptr;
        if (open && buckets.back().group != group) open = false;  // one all-reduce sums over one group
        if (!open) buckets.push_back({u, u, 0, unit.offset + unit.numel, 0, group});  // empty, ending where u ends
        GradBucket& b = buckets.back();
        // walking downwards, a bucket grows towards lower offsets: units are layer-major and contiguous
        CHECK(unit.offset + unit.numel == b.offset,
              "unit %d (%s) does not end where the bucket starts: the flat buffer is not layer-major", u,
              unit.name.c_str());
        b.first_unit = u;
        b.units += 1;
        b.offset = unit.offset;
        b.numel += unit.numel;
        open = (double)b.numel * bytes_per_element < cap;
    }
    return buckets;
    // EXERCISE 02.2 end
}

DataParallelHooks::DataParallelHooks(Model& model, ReduceGroups groups, DataParallelOptions opt)
    : model_(model), groups_(groups), opt_(opt) {
    CHECK(model.grads().defined(), "data parallelism all-reduces the model's whole flat gradient buffer, and this "
                                   "model has none (ModelOptions::resident_grads is off: use ZeRO's hooks)");
    const ParamLayout& layout = model.layout();
    // naive: one "bucket" of everything (one per group when units are summed over different groups), sent
    // after backward by finish_gradients
    buckets_ = plan_buckets(layout, opt.mode == DpMode::naive ? std::numeric_limits<double>::infinity() : opt.bucket_mb,
                            dtype_size(model.grads().dtype), &groups_);
    bucket_of_unit_.assign(layout.units.size(), -1);
    for (size_t b = 0; b < buckets_.size(); b++)
        for (int u = buckets_[b].first_unit; u <= buckets_[b].last_unit; u++)
            if (layout.units[u].numel > 0) bucket_of_unit_[u] = (int)b;
    ready_in_bucket_.assign(buckets_.size(), 0);
    started_.assign(buckets_.size(), false);
    target_ = model.grads();
    model.set_gradient_sink(this);
}

DataParallelHooks::~DataParallelHooks() {
    model_.set_gradient_sink(nullptr);  // back to the model's own buffer
}

Tensor DataParallelHooks::grads(int unit) {
    const ParamUnit& u = model_.layout().units[unit];
    return target_.flat(u.offset, u.numel);
}

void DataParallelHooks::note(const char* what, int index) {
    if (tracing_)
        trace_.push_back({step_, std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
                          what, index});
}

void DataParallelHooks::begin_step() {
    step_++;
    note("step", 0);
    stats_ = DpStepStats{};
    counters_at_begin_ = groups_.counters();
}

// Under accumulation with no_sync, micro-batches before the last add into the flat buffer without a
// word to the other ranks: the all-reduce of the final sum is the all-reduce of every micro-batch at once.
// Without no_sync every micro-batch is reduced as it finishes. Reducing the ACCUMULATED buffer each time
// would count the micro-batches already reduced K times over (every rank holds their sum, and the
// all-reduce adds K copies of it), so a micro-batch after the first accumulates into its own zeroed
// buffer (fresh_), which is reduced and then added in: correct, at the price of a second gradient buffer and grad_accum times
// the bytes — the cost no_sync avoids.
void DataParallelHooks::before_gradients(int64_t a, bool last) {
    if (a > 0) end_micro_batch();
    communicate_ = last || !opt_.no_sync;
    if (a == 0 || opt_.no_sync) {
        target_ = model_.grads();  // zeroed by the step: fresh and accumulated are the same
    } else {
        if (!fresh_.defined()) fresh_ = Tensor::empty(model_.grads().shape, model_.grads().dtype, model_.device(), Tag::grads);
        fill(fresh_, 0.0f);
        target_ = fresh_;
    }
    std::fill(ready_in_bucket_.begin(), ready_in_bucket_.end(), 0);
    std::fill(started_.begin(), started_.end(), false);
    in_backward_ = true;
    note("backward", (int)a);
}

void DataParallelHooks::layer_grads_ready(int unit) {
    note("ready", unit);
    if (!communicate_ || opt_.mode == DpMode::naive) return;
    observe_completions();  // an MPI call between layers: lets the buckets already sent make progress
    const int b = bucket_of_unit_[unit];
    const GradBucket& bucket = buckets_[b];
    // a tied embedding receives the head's contribution first and its own last: its unit (and so its
    // bucket) is final only when the model calls this for the embedding, after embed_backward
    if (++ready_in_bucket_[b] == bucket.units) start(b);
}

void DataParallelHooks::finish_gradients() {
    end_micro_batch();
    stats_.bytes = (groups_.counters() - counters_at_begin_).total_bytes();
}

void DataParallelHooks::start(int b) {
    Timer timer;
    started_[b] = true;
    Tensor x = target_.flat(buckets_[b].offset, buckets_[b].numel);
    note("start", b);
    pending_.push_back({buckets_[b].group->all_reduce_async(x), (double)x.nbytes(), b});  // SUM: the loss is already / global tokens
    stats_.comm_s += timer.seconds();
    stats_.all_reduces += 1;
    stats_.started_in_backward += in_backward_ ? 1 : 0;
    stats_.reduced_bytes += (double)x.nbytes();
}

void DataParallelHooks::observe_completions() {
    Timer timer;
    std::vector<InFlight> still;
    for (InFlight& p : pending_) {
        if (p.handle.test()) {
            stats_.hidden_bytes += p.bytes;  // done, and backward is still running
            note("done", p.bucket);
        } else {
            still.push_back(std::move(p));
        }
    }
    pending_ = std::move(still);
    stats_.comm_s += timer.seconds();
}

void DataParallelHooks::end_micro_batch() {
    in_backward_ = false;
    if (communicate_) {
        // naive: its buckets (the whole buffer, a range per group) now; bucketed: what backward did not start — nothing, unless
        // the micro-batch wrote only some of a bucket's units (a pipeline stage holding several model chunks
        // writes one chunk's per pass; the others' last contributions came in earlier, silent passes)
        for (size_t b = 0; b < buckets_.size(); b++)
            if (!started_[b]) start((int)b);
        // exposed time: backward is over, nothing left to overlap with. Under NCCL, wait() only orders the
        // compute stream after the all-reduce and returns at once, so the host timer would read ~0: sync
        // the device first (backward's kernels done) and after the waits (communication done), and the
        // difference is the communication backward did not hide.
        const bool on_stream = groups_.data().backend() == CommBackend::nccl;
        if (on_stream) device_synchronize(model_.device());
        Timer timer;
        note("wait", 0);
        for (InFlight& p : pending_) {
            p.handle.wait();
            note("done", p.bucket);
        }
        pending_.clear();
        if (on_stream) device_synchronize(model_.device());
        const double waited = timer.seconds();
        stats_.comm_s += waited;
        stats_.exposed_s += waited;
        note("waited", 0);
        communicate_ = false;
    }
    if (target_.data() != model_.grads().data()) {
        Tensor g = model_.grads();
        add_inplace(g, target_);  // this micro-batch's reduced gradients join the accumulated sum
        target_ = model_.grads();
    }
}

}  // namespace penta
