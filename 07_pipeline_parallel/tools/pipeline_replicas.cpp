// pipeline_replicas.cpp — the mirror pair's gradient sum (pipeline_replicas.hpp).
// Playbook: "Pipeline parallelism". Test: `make test CH=07` (a tied model over pp 2 and 4, DualPipe).
#include "pipeline_replicas.hpp"

#include <algorithm>

namespace penta {

bool PipelineReplicaHooks::needed(const ParamLayout& layout) {
    for (const ParamTensor& t : layout.tensors)
        if (t.grad_summed_on & kAxisPP) return true;
    return false;
}

PipelineReplicaHooks::PipelineReplicaHooks(const Model& model, AdamW& optimizer, Comm& pp) : optim_(optimizer) {
    const int s = pp.rank(), p = pp.size();
    pair_ = pp.split(std::min(s, p - 1 - s), s, "pp mirror");
    // the optimizer's ranges of tensors held twice, merged where they touch
    const ParamLayout& layout = model.layout();
    double fingerprint = 0;
    for (const ParamRange& r : optimizer.ranges()) {
        if (r.name.empty() || !(layout.find(r.name).grad_summed_on & kAxisPP) || r.count == 0) continue;
        if (!spans_.empty() && spans_.back().first + spans_.back().second == r.offset) spans_.back().second += r.count;
        else spans_.push_back({r.offset, r.count});
        fingerprint += (double)(spans_.size() * 1000003 + r.name.size()) * (double)(r.count + 7 * r.name_offset);
    }
    // both stages of the pair must reduce the same elements: compare what each found
    if (pair_->size() > 1) {
        const double hi = pair_->all_reduce_scalar(fingerprint, ReduceOp::max);
        const double lo = -pair_->all_reduce_scalar(-fingerprint, ReduceOp::max);
        CHECK(hi == lo, "pipeline stages %d and %d hold different parts of the tensors they share (a tied embedding "
              "or DualPipe's two copies): their gradients cannot be summed element by element", std::min(s, p - 1 - s),
              std::max(s, p - 1 - s));
    }
}

void PipelineReplicaHooks::before_update() {
    if (pair_->size() == 1) return;  // the middle stage of an odd pipeline, or one stage holding both copies
    CHECK(optim_.grad.defined(), "the optimizer has no gradient to sum over the pipeline pair yet");
    std::vector<CommHandle> pending;
    std::vector<Tensor> views;
    views.reserve(spans_.size());  // the async calls hold on to these tensors until their wait
    for (const auto& [offset, count] : spans_) {
        views.push_back(optim_.grad.flat(offset, count));
        pending.push_back(pair_->all_reduce_async(views.back()));  // the two stages' parts: SUM
    }
    for (CommHandle& h : pending) h.wait();
}

double PipelineReplicaHooks::bytes() const { return pair_->counters().total_bytes(); }

}  // namespace penta
