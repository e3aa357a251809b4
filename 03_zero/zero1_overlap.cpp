// zero1_overlap.cpp — ZeRO-1/2's weight all-gather deferred into the next forward (zero1_overlap.hpp).
#include "zero1_overlap.hpp"

#include "../common/watchdog.hpp"

namespace penta {

void GatherWaits::wait(CommHandle& h) {
    if (!h.pending()) return;
    waited++;
    if (h.test()) return;  // done while the rank computed (test() also lets MPI progress it)
    exposed++;
    const double blocked = comm_blocked_seconds();
    h.wait();
    seconds += comm_blocked_seconds() - blocked;
}

void DeferredWeights::start(const ReduceGroups& groups, Tensor staged) {
    CHECK(!pending(), "ZeRO deferred gather: a step's gathers started before the previous step's finished");
    staged_ = std::move(staged);
    inflight_ = shards_.all_gather_start(groups, staged_, model_.params());
}

Tensor DeferredWeights::acquire(int unit, int) {
    if (unit < (int)inflight_.size()) waits_.wait(inflight_[unit]);  // the earlier units computed while it came
    return shards_.unit_of(model_.params(), unit);
}

void DeferredWeights::finish_all() {
    for (CommHandle& h : inflight_) waits_.wait(h);
    inflight_.clear();
    staged_ = Tensor();
}

bool DeferredWeights::pending() const {
    for (const CommHandle& h : inflight_)
        if (h.pending()) return true;
    return false;
}

}  // namespace penta
