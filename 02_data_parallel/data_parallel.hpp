// data_parallel.hpp — data parallelism: every rank holds the whole model, trains on its own rows of the
// global batch, and all-reduces (sums) the gradients before the optimizer step.
//
// Playbook: "Data parallelism" — its three optimisations, each one a mode here:
//   naive     one all-reduce of the whole flat gradient buffer after backward (communication fully exposed)
//   bucketed  the gradient buffer cut into buckets of about --bucket-mb MiB in the order backward finishes
//             them (last layer first); a bucket's all-reduce starts the moment its last unit's gradients
//             are final, so it travels while backward computes the earlier layers
//   no_sync   under gradient accumulation only the LAST micro-batch's backward communicates: the sum of
//             sums is the same, with grad_accum times fewer bytes
// The loss of every rank is already divided by the GLOBAL batch's token count (ARCHITECTURE.md §6), so the
// all-reduce is a SUM, not an average: after it every rank holds exactly the single-device gradient.
// Bytes per step (ring all-reduce of M gradient bytes over K ranks): 2(K-1)/K · M, checked against
// Comm's counters. The ring itself, built from send/recv, is ring_all_reduce.hpp. Each unit is reduced over
// its own group (reduce_groups.hpp): the whole dense model over dp; a MoE's experts over edp (chapter 08).
//
//   mpirun -np 2 build/bin/02_data_parallel --dp 2 --dp-mode bucketed --bucket-mb 1
//   mpirun -np 4 build/bin/tests_02 -ts='ch02 np4'       (tests/02_data_parallel/test_dp.cpp: same losses and weights as one rank)
#pragma once
#include <string>
#include <vector>

#include "../common/comm.hpp"
#include "../common/config.hpp"
#include "../common/training_step.hpp"
#include "reduce_groups.hpp"

namespace penta {

enum class DpMode { naive, bucketed };
DpMode parse_dp_mode(const std::string& flag_value);  // "naive" | "bucketed"; the error names --dp-mode
const char* dp_mode_name(DpMode m);

struct DataParallelOptions {
    DpMode mode = DpMode::bucketed;
    double bucket_mb = 25;  // MiB per bucket (PyTorch DDP's bucket_cap_mb default)
    bool no_sync = true;    // under grad accumulation, communicate in the last micro-batch's backward only
};

// Chapters that run data parallelism alone (02, and ZeRO's 03): --dp must be the number of ranks and
// every other axis 1; the error names the flags and the chapter.
void check_data_parallel_only(const TrainConfig& cfg, int world_size, const char* chapter);

// This rank's share of the global batch: rows [d·mb·ga, (d+1)·mb·ga) of dp·mb·ga sequences; the token
// count and the loss are summed over the dp group (its batch_group).
BatchPlan data_parallel_plan(const TrainConfig& cfg, Comm& dp);

// A run of whole units (layer-major, so one contiguous range of the flat buffer) all-reduced together, over
// one group.
struct GradBucket {
    int first_unit = 0, last_unit = 0;  // units [first_unit, last_unit]
    int units = 0;                      // of which present (non-empty): the bucket is sent when all are final
    int64_t offset = 0, numel = 0;      // elements [offset, offset + numel) of the flat gradient buffer
    Comm* group = nullptr;              // the ranks its units are summed over (ReduceGroups::of)
};
// Buckets in the order backward completes them (head first, embedding last). Units are walked in that
// order and a bucket is closed once it holds >= bucket_mb MiB, or when the next unit is reduced over another
// group (a MoE layer's experts), so a unit is never split (a unit bigger than the cap is a bucket of its own)
// and the last bucket may be smaller. Empty units (a pipeline stage's absent layers) are skipped.
// bucket_mb <= 0: one bucket per unit. groups: each unit's group (nullptr: one group, left unset).
std::vector<GradBucket> plan_buckets(const ParamLayout& layout, double bucket_mb, int64_t bytes_per_element = 4,
                                     const ReduceGroups* groups = nullptr);

// What one step's gradient communication cost on this rank.
struct DpStepStats {
    double comm_s = 0;     // wall time inside Comm calls made by the hooks: starting, testing, waiting
    double exposed_s = 0;  // of which: blocked in wait() with no backward left to overlap
    double bytes = 0;      // bytes counted by the reduce groups' Comms during the step (ring accounting)
    int64_t all_reduces = 0;          // all-reduce calls this step
    int64_t started_in_backward = 0;  // of which: started while backward was still running
    double reduced_bytes = 0;  // gradient bytes all-reduced (the buffers, not the ring's traffic)
    double hidden_bytes = 0;   // of which: seen complete by a test() while backward was still running
    // Hidden: the fraction of the gradient bytes whose all-reduce finished behind backward, so nobody
    // waited for it. A bucket that finishes in the final wait counts as exposed even if most of it moved
    // during backward, so this is a lower bound; naive is 0 by construction.
    double hidden_fraction() const { return reduced_bytes > 0 ? hidden_bytes / reduced_bytes : 0.0; }
};

// 2(K-1)/K · M: the bytes one ring all-reduce of gradient_bytes sends from each of K ranks
double dp_bytes_per_step_formula(int K, double gradient_bytes);

// The step hooks of data parallelism. Installs itself as the model's gradient sink (backward's
// gradients land in the flat buffer as before; the sink hears when each unit is final) and removes
// itself in the destructor. The optimizer is plain AdamW over the whole buffer (make_adamw): after the
// all-reduce every rank holds the same gradients, so every rank takes the same step and the replicas
// stay equal. groups: each unit's group — one Comm (dp) for a dense model.
class DataParallelHooks : public StepHooks, public GradientSink {
   public:
    DataParallelHooks(Model& model, ReduceGroups groups, DataParallelOptions opt = {});
    ~DataParallelHooks() override;
    DataParallelHooks(const DataParallelHooks&) = delete;
    DataParallelHooks& operator=(const DataParallelHooks&) = delete;

    // StepHooks
    void begin_step() override;
    void before_gradients(int64_t a, bool last) override;
    void finish_gradients() override;
    // GradientSink
    Tensor grads(int unit) override;
    void layer_grads_ready(int unit) override;

    const DpStepStats& last_step() const { return stats_; }  // valid after finish_gradients

    // --trace: every step's events with their steady-clock times (seconds; one clock for every process of a
    // machine): "step" (begin), "backward" (a micro-batch's backward begins; index: micro-batch), "ready"
    // (index: unit, its gradients final), "start" / "done" (index: bucket; done = seen complete by a test()
    // during backward or at the end of a wait()), "wait" / "waited" (blocked after backward, begin / end)
    struct TraceEvent {
        int64_t step;
        double t;
        const char* what;
        int index;
    };
    void record_trace(bool on) { tracing_ = on; }
    const std::vector<TraceEvent>& trace() const { return trace_; }
    const std::vector<GradBucket>& buckets() const { return buckets_; }
    const DataParallelOptions& options() const { return opt_; }

   private:
    void start(int bucket);           // all_reduce_async of one bucket of target_ over the bucket's group, timed
    void end_micro_batch();           // the naive all-reduce, or wait for the buckets; then accumulate
    void observe_completions();       // test() every pending handle: lets MPI progress, counts what finished

    Model& model_;
    ReduceGroups groups_;
    DataParallelOptions opt_;
    std::vector<GradBucket> buckets_;
    std::vector<int> bucket_of_unit_;      // unit -> bucket index (-1: absent unit)
    std::vector<int> ready_in_bucket_;     // units of each bucket final in this micro-batch
    std::vector<bool> started_;            // buckets whose all-reduce this micro-batch started
    struct InFlight {
        CommHandle handle;
        double bytes;
        int bucket;
    };
    std::vector<InFlight> pending_;        // buckets in flight
    Tensor target_;       // where this micro-batch's backward accumulates: model.grads(), or fresh_
    Tensor fresh_;        // no_sync off, micro-batch > 0: its own gradients, reduced, then added in
    bool communicate_ = false;  // this micro-batch's backward communicates
    bool in_backward_ = false;
    CommCounters counters_at_begin_;
    DpStepStats stats_;
    bool tracing_ = false;
    int64_t step_ = 0;
    std::vector<TraceEvent> trace_;
    void note(const char* what, int index);  // a trace event now (when tracing)
};

}  // namespace penta
