// reduce_groups.cpp — a unit's data-parallel group from its parallelism (reduce_groups.hpp).
// Playbook: "Data parallelism", "Expert parallelism". Test: `make test CH=02`, `make test CH=08`.
#include "reduce_groups.hpp"

namespace penta {

Comm& ReduceGroups::of(const ParamUnit& u) const {
    if (!(u.sharded_on & kAxisEP)) return *data_;
    // the experts of one ep rank are held by the ranks of its edp group only
    CHECK(expert_, "unit %s is expert-parallel (sharded over ep): its gradients are summed over edp, the ranks that "
          "hold the same experts, and these hooks were given only the %s group", u.name.c_str(), data_->name().c_str());
    return *expert_;
}

std::vector<Comm*> ReduceGroups::groups() const {
    std::vector<Comm*> g{data_};
    if (expert_ && expert_ != data_) g.push_back(expert_);
    return g;
}

CommCounters ReduceGroups::counters() const {
    CommCounters sum;
    for (Comm* g : groups()) {
        const CommCounters& c = g->counters();
        for (int i = 0; i < kNumCommOps; i++) sum.calls[i] += c.calls[i], sum.bytes[i] += c.bytes[i];
        sum.scalar_reductions += c.scalar_reductions;
    }
    return sum;
}

}  // namespace penta
