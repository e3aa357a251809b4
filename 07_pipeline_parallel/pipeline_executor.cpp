// pipeline_executor.cpp — the executor of every pipeline schedule (pipeline_executor.hpp). Read run(): one
// loop over this stage's list, the sends and receives of each op beside its Model call.
// Playbook: "Pipeline parallelism". Run: `mpirun -np 2 build/bin/07_pipeline_parallel --pp 2`.
#include "pipeline_executor.hpp"

#include <chrono>
#include <cmath>

#include "../common/ops.hpp"
#include "../common/training_step.hpp"
#include "../common/watchdog.hpp"

namespace penta {

namespace {
double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

PipelineExecutor::PipelineExecutor(PipelinePlan plan, Comm& pp) : plan_(std::move(plan)), pp_(pp), me_(pp.rank()) {
    CHECK(pp.size() == plan_.stages, "the pipeline plan has %d stages and the pipeline group %d ranks", plan_.stages,
          pp.size());
    // every message has a tag of its own (MPI matches by tag; NCCL by order, which check_plan proved)
    CHECK(2 * plan_.virtual_stages * plan_.micro_batches < kWatchdogTag,
          "%d micro-batches through %d virtual stages need more message tags than MPI guarantees (%d)",
          plan_.micro_batches, plan_.virtual_stages, kWatchdogTag);
    pp.barrier();
    origin_ = steady_seconds();
}

double PipelineExecutor::now() const { return steady_seconds() - step_origin_; }

int PipelineExecutor::tag(bool forward, int mb, int vs) const {
    return (vs * plan_.micro_batches + mb) * 2 + (forward ? 1 : 0);
}

bool PipelineExecutor::input_of(const PipeOp& op, bool& forward, int& from, int& vs) const {
    vs = plan_.virtual_stage(me_, op.chunk, op.mb);
    if (op.kind == PipeOpKind::F && vs > 0) {
        forward = true, from = plan_.where(op.mb, vs - 1).first;
        return true;
    }
    if ((op.kind == PipeOpKind::B || op.kind == PipeOpKind::BW) && vs < plan_.virtual_stages - 1) {
        forward = false, from = plan_.where(op.mb, vs + 1).first;
        return true;
    }
    return false;
}

// Posts op k's receive (once): a fresh buffer per message, since the model keeps what it is handed until W
void PipelineExecutor::post_receive(int k, const Model& model, const std::vector<MicroBatch>& mbs) {
    const std::vector<PipeOp>& ops = plan_.ops[me_];
    if (k >= (int)ops.size() || posted_.count(k)) return;
    bool forward;
    int from, vs;
    if (!input_of(ops[k], forward, from, vs)) return;
    const MicroBatch& mb = mbs[ops[k].mb];
    Pending p;
    p.buffer = Tensor::empty({model.stage_rows(mb), model.config().hidden}, model.precision().act, model.device(),
                             Tag::comm);
    p.posted = now(), p.peer = from, p.local = from == me_;
    if (!p.local) p.handle = pp_.recv_async(p.buffer, from, tag(forward, ops[k].mb, vs));  // (N, h)
    posted_[k] = std::move(p);
}

Tensor PipelineExecutor::wait_receive(int k, PipeOpRecord& rec) {
    auto it = posted_.find(k);
    if (it == posted_.end()) return Tensor();  // this op receives nothing
    Pending p = std::move(it->second);
    posted_.erase(it);
    rec.posted = p.posted;
    if (p.local) {  // from another chunk of this stage: sent earlier in the list (check_plan)
        bool forward;
        int from, vs;
        input_of(plan_.ops[me_][k], forward, from, vs);
        auto msg = local_.find(tag(forward, plan_.ops[me_][k].mb, vs));
        CHECK(msg != local_.end(), "stage %d op %d: its message from this stage was never sent", me_, k);
        Tensor t = msg->second;
        local_.erase(msg);
        return t;
    }
    const double t0 = now();
    p.handle.wait();  // under the watchdog's deadline: a stage that never sends brings the job down
    rec.wait = now() - t0;
    if (tracing_ && rec.wait > 0)
        trace_.push_back({strfmt("wait: %s mb %d from stage %d", plan_.ops[me_][k].kind == PipeOpKind::F ? "activation" : "gradient",
                                 plan_.ops[me_][k].mb, p.peer),
                          step_origin_ - origin_ + t0, rec.wait, 1});
    return p.buffer;
}

void PipelineExecutor::send(const Tensor& t, bool forward, int mb, int to_vs, double at) {
    const int peer = plan_.where(mb, to_vs).first;
    Tensor buf = t.clone(t.device(), Tag::comm);  // the model's tensor is freed now; the copy travels
    if (peer == me_) {
        local_[tag(forward, mb, to_vs)] = buf;
        return;
    }
    sends_.push_back({pp_.send_async(buf, peer, tag(forward, mb, to_vs)), buf});
    if (tracing_)
        trace_.push_back({strfmt("send %s mb %d to stage %d", forward ? "activation" : "gradient", mb, peer),
                          step_origin_ - origin_ + at, now() - at, 1});
}

ScheduleResult PipelineExecutor::run(Model& model, std::vector<MicroBatch>& mbs, double global_tokens,
                                     StepHooks& hooks) {
    const std::vector<PipeOp>& ops = plan_.ops[me_];
    CHECK((int)mbs.size() == plan_.micro_batches,
          "the step has %zu micro-batches on this rank and the pipeline schedule %d (--grad-accum)", mbs.size(),
          plan_.micro_batches);
    const Device dev = model.device();
    int weight_ops = 0, weight_seen = 0, in_flight = 0;
    for (const PipeOp& op : ops) weight_ops += op.writes_weight_grads();
    std::map<std::pair<int, int>, MicroBatchActs> acts;  // (mb, chunk) between its F and its W
    ScheduleResult r;
    last_ = PipelineStepRecord{};
    last_.forward_bytes.assign(plan_.chunks, -1);
    const double sent0 = pp_.counters().bytes[(int)CommOp::send];
    pp_.barrier();  // the stages start the step's clock together
    step_origin_ = steady_seconds();
    last_.activations_before = kept_activation_bytes(dev);  // device + host (offload)

    for (int k = 0; k < (int)ops.size(); k++) {
        const PipeOp& op = ops[k];
        const MicroBatch& mb = mbs[op.mb];
        const int vs = plan_.virtual_stage(me_, op.chunk, op.mb);
        PipeOpRecord rec;
        rec.op = op;
        post_receive(k, model, mbs);
        // the next op's message may arrive while this one computes. Not on NCCL: it issues the receives queued
        // together as one group and waits for all of it, and the next op's message may need this op's output
        if (pp_.backend() == CommBackend::mpi) post_receive(k + 1, model, mbs);
        Tensor in = wait_receive(k, rec);
        rec.start = now();
        if (op.kind == PipeOpKind::F) {
            const int64_t before = kept_activation_bytes(dev);
            Tensor x;  // the stage input is a saved activation (its first layer's x_in): out of the comm buffer
            if (in.defined()) {
                x = Tensor::empty(in.shape, in.dtype, dev, Tag::activations);  // (N, h)
                copy(x, in);
            }
            MicroBatchActs a = model.forward(mb, global_tokens, x, op.chunk);
            if (r.first_non_finite < 0 && !std::isfinite(a.loss)) r.first_non_finite = op.mb;
            r.loss += a.loss, r.aux_loss += a.aux_loss;  // the loss: 0 unless this chunk holds the head
            if (vs < plan_.virtual_stages - 1) {
                send(a.output, true, op.mb, vs + 1, now());  // (N, h) to the next virtual stage
                a.output = Tensor();
            }
            const int64_t kept = kept_activation_bytes(dev) - before;
            if (last_.forward_bytes[op.chunk] < 0) last_.forward_bytes[op.chunk] = kept;
            if (r.saved_activation_bytes == 0 && acts.empty() && weight_seen == 0) r.saved_activation_bytes = kept;
            acts.emplace(std::make_pair(op.mb, op.chunk), std::move(a));
            in_flight++;
        } else {
            MicroBatchActs& a = acts.at({op.mb, op.chunk});
            if (op.writes_weight_grads()) {
                hooks.before_gradients(weight_seen, weight_seen + 1 == weight_ops);  // last: DP's no_sync ends
                weight_seen++;
            }
            if (op.kind == PipeOpKind::W) {
                model.backward_weight(a);
            } else {
                // d loss / d output from the next virtual stage (none at the head: the loss is here)
                Tensor d_in = op.kind == PipeOpKind::BW ? model.backward(a, in) : model.backward_input(a, in);
                if (vs > 0) send(d_in, false, op.mb, vs - 1, now());  // (N, h) to the previous virtual stage
            }
            if (op.writes_weight_grads()) acts.erase({op.mb, op.chunk}), in_flight--;
        }
        device_synchronize(dev);  // honest wall times on a GPU
        rec.end = now();
        rec.activation_bytes = kept_activation_bytes(dev);
        rec.in_flight = in_flight;
        if (tracing_)
            trace_.push_back({strfmt("%s%d%s", pipe_op_name(op.kind), op.mb,
                                     plan_.chunks > 1 ? strfmt(" c%d", op.chunk).c_str() : ""),
                              step_origin_ - origin_ + rec.start, rec.end - rec.start, 0});
        last_.ops.push_back(rec);
        if (after_op) after_op(k, op);
    }
    for (auto& [h, buf] : sends_) h.wait();  // complete once their receivers get to them (check_plan: they all do)
    sends_.clear();
    CHECK(acts.empty() && posted_.empty() && local_.empty(),
          "stage %d: the schedule left %zu micro-batches without their W, %zu receives unused", me_, acts.size(),
          posted_.size());
    last_.sent_bytes = pp_.counters().bytes[(int)CommOp::send] - sent0;
    return r;
}

}  // namespace penta
