// pipeline_clock.hpp — what a pipeline step did, seen on a logical clock: the ops every stage ran (gathered
// from the stages), replayed with F = 1 unit and B, W as set or as measured, give each stage's busy time, the
// bubble, the micro-batches in flight, and the ASCII timeline. Beside them the wall clock's bubble, from the same
// records.
//
// Playbook: "Pipeline parallelism" — r_bubble = (p-1)/m (AFAB, 1F1B), (p-1)/(v·m) interleaved, ZB-H1 below
// 1F1B, and the activations 1F1B keeps, p - i micro-batches on stage i. The replay: an op starts when its stage
// has finished the op before it and its message has arrived (the sender's op ended; sending costs 0 units).
// The bubble of a stage is (makespan - its busy time) / its busy time, the makespan the last op's end on any
// stage — the playbook's ratio of idle to compute time. Exactly the formulas on this clock, by construction of
// the schedules; tests/07_pipeline_parallel/test_schedules.cpp checks them.
//   mpirun -np 4 build/bin/07_pipeline_parallel --pp 4 --pp-schedule zb1 --grad-accum 8   (prints all of it)
#pragma once
#include <string>
#include <vector>

#include "../../common/comm.hpp"
#include "../pipeline_executor.hpp"

namespace penta {

// what one F, B and W cost on the logical clock (BW = B + W)
struct LogicalCosts {
    double f = 1, b = 1, w = 1;
    double of(PipeOpKind k) const;
};

struct LogicalClock {
    double makespan = 0;
    std::vector<double> busy;                       // per stage
    std::vector<std::vector<double>> start, end;    // per stage, per op in the order it ran
    std::vector<int> peak_in_flight;                // per stage: micro-batch chunks between F and W at once
    double bubble(int stage) const { return (makespan - busy[stage]) / busy[stage]; }
};
// ran: per stage, the ops in the order that stage ran them (a list check_plan accepts)
LogicalClock replay(const PipelinePlan& plan, const std::vector<std::vector<PipeOp>>& ran, const LogicalCosts& c);

// The timeline, one row per stage, one column per time unit (costs rounded to whole units): each op as its
// kind and micro-batch (and, with several chunks per stage, the chunk as a letter: a, b, ...), filled with
// '-' for the units it lasts; '.' is the bubble.
std::string ascii_timeline(const PipelinePlan& plan, const std::vector<std::vector<PipeOp>>& ran,
                           const LogicalClock& clock, const LogicalCosts& c);

// Every stage's record of one step, on every rank of the pipeline group (collective over pp).
struct PipelineStepRecords {
    std::vector<std::vector<PipeOpRecord>> stages;
    std::vector<double> sent_bytes;                      // per stage
    std::vector<int64_t> activations_before;             // per stage, kept activations when the step began
    std::vector<std::vector<int64_t>> forward_bytes;     // per stage, per chunk: what its first F kept
    std::vector<std::vector<PipeOp>> ops() const;        // what ran, per stage
};
PipelineStepRecords gather_step_records(Comm& pp, const PipelineStepRecord& mine, int chunks);

// The costs the wall clock measured: mean F, B and W time (B and W of fused BW ops apportioned as their means
// over the split ones, or 2:1 when nothing ran split), in units of the mean F
LogicalCosts measured_costs(const PipelineStepRecords& r);
// per stage: (the last op's end on any stage - its compute time) / its compute time, in wall seconds
std::vector<double> wall_bubble(const PipelineStepRecords& r);

// int64 vectors of every rank of `group`, on every rank (an all-gather of a padded i32 buffer)
std::vector<std::vector<int64_t>> all_gather_int64(Comm& group, const std::vector<int64_t>& mine);

}  // namespace penta
