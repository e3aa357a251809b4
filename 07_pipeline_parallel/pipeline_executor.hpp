// pipeline_executor.hpp — one executor for every pipeline schedule: it runs this stage's list of a
// PipelinePlan (pipeline_schedule.hpp) on the model, sending each activation to the next virtual stage and each
// input gradient to the previous one with asynchronous send/recv over the pipeline group, and records what ran.
//
// Playbook: "Pipeline parallelism". Per op of the list:
//   F   receive the previous virtual stage's output (with MPI posted one op ahead, so it arrives while this
//       stage computes), Model::forward of the op's chunk, send the output on (isend: the stage goes on at once)
//   B   receive d loss / d output from the next virtual stage, Model::backward_input, send d loss / d input back
//   W   Model::backward_weight of an earlier B: no message at all — zero-bubble schedules run it in the bubble
//   BW  the fused Model::backward (B then W), as AFAB, 1F1B and interleaved do
// Sends never block and receives do: the rule tools/schedule_check.cpp proves a list cannot deadlock under. A stage
// waits on a receive under the watchdog's deadline (--comm-timeout), and a stage that fails brings the job down
// (run_main), so no stage waits forever. The hooks hear before every op that writes weight gradients
// (before_gradients(i, last), last: the stage's final one — data parallelism's no_sync), so gradient
// synchronisation happens once per step, after the last micro-batch.
// The loss is the head's stage's; the training step sums it (and the MoE aux losses) over the pipeline group
// (Trainer::stages), so every rank reports the same number. Messages between two chunks of one stage (--pp 1 with chunks) are handed over locally.
//   mpirun -np 4 build/bin/07_pipeline_parallel --pp 4 --pp-schedule 1f1b --grad-accum 8
#pragma once
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "../common/comm.hpp"
#include "../common/schedule.hpp"
#include "pipeline_schedule.hpp"

namespace penta {

// What one op of the list did on this stage, wall times in seconds since the step's start (a barrier of the
// pipeline group, so the stages' clocks start together).
struct PipeOpRecord {
    PipeOp op;
    double start = 0, end = 0;     // the compute, after its input arrived
    double posted = 0;             // when its receive was posted (= start - wait when it had to wait)
    double wait = 0;               // blocked on its receive before the compute
    int64_t activation_bytes = 0;  // kept activations on this rank after the op (kept_activation_bytes)
    int in_flight = 0;             // micro-batch chunks between their F and their W after the op
};

struct PipelineStepRecord {
    std::vector<PipeOpRecord> ops;   // in the order they ran
    double sent_bytes = 0;           // what this stage sent on the pipeline group in the step
    int64_t activations_before = 0;  // kept activations when the step began
    std::vector<int64_t> forward_bytes;  // per chunk: the activations (device + host) the chunk's first F kept

    // the most activations the step held between two ops, beyond what it began with (what the planner predicts)
    int64_t peak_held() const {
        int64_t held = 0;
        for (const PipeOpRecord& r : ops) held = std::max(held, r.activation_bytes - activations_before);
        return held;
    }
};

// One span for the Chrome trace (tools/pipeline_clock.hpp writes them): compute on track 0, communication on track 1.
struct TraceSpan {
    std::string name;
    double start = 0, dur = 0;  // seconds since the executor's clock origin
    int track = 0;
};

class PipelineExecutor : public Schedule {
   public:
    // plan: checked (make_pipeline_plan); pp: the pipeline group, whose rank is this stage
    PipelineExecutor(PipelinePlan plan, Comm& pp);
    const char* name() const override { return pipe_schedule_name(plan_.kind); }
    ScheduleResult run(Model& model, std::vector<MicroBatch>& micro_batches, double global_tokens,
                       StepHooks& hooks) override;

    const PipelinePlan& plan() const { return plan_; }
    const PipelineStepRecord& last_step() const { return last_; }
    // keep every step's spans for a trace (off: only the last step's record)
    void record_trace(bool on) { tracing_ = on; }
    const std::vector<TraceSpan>& trace() const { return trace_; }
    // called on this stage after op k of its list has run and its message is on its way (a fault injection point
    // inside the schedule: chapter 07's --inject-at first-f); empty: nothing
    std::function<void(int k, const PipeOp& op)> after_op;

   private:
    struct Pending {  // a posted receive
        Tensor buffer;
        CommHandle handle;
        double posted = 0;
        int peer = 0;
        bool local = false;
    };
    // the message op k receives: (forward?, mb, virtual stage it is for); false when it receives none
    bool input_of(const PipeOp& op, bool& forward, int& from_stage, int& vs) const;
    void post_receive(int k, const Model& model, const std::vector<MicroBatch>& mbs);
    Tensor wait_receive(int k, PipeOpRecord& rec);
    void send(const Tensor& t, bool forward, int mb, int to_vs, double now);
    int tag(bool forward, int mb, int vs) const;
    double now() const;

    PipelinePlan plan_;
    Comm& pp_;
    int me_;
    double origin_ = 0, step_origin_ = 0;  // steady-clock seconds: the executor's and the step's start
    std::map<int, Pending> posted_;        // by op index
    std::map<int, Tensor> local_;          // messages to this stage itself, by tag
    std::vector<std::pair<CommHandle, Tensor>> sends_;  // isends in flight and their buffers
    PipelineStepRecord last_;
    bool tracing_ = false;
    std::vector<TraceSpan> trace_;
};

}  // namespace penta
