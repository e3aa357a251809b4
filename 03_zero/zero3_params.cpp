// zero3_params.cpp — ZeRO-3's all-gather on demand with prefetch (zero3_params.hpp).
// Playbook: "ZeRO-3: adding parameter partitioning". Test: `make test CH=03`.
#include "zero3_params.hpp"

namespace penta {

GatheredParams::GatheredParams(const UnitShards& shards, ReduceGroups groups, Tensor shard)
    : shards_(shards), groups_(groups), shard_(std::move(shard)), units_(shards.units()) {}

void GatheredParams::start_gather(int unit) {
    Unit& x = units_[unit];
    x.whole = Tensor::empty({shards_.unit(unit).numel}, shard_.dtype, shard_.device(), Tag::comm);  // (unit)
    x.gather = shards_.group(groups_, unit).all_gather_async(shards_.piece_of(shard_, unit), x.whole);
    gathers_++;
}

Tensor GatheredParams::acquire(int unit, int next) {
    // EXERCISE 03.1 begin: ZeRO-3's gather on demand: acquire gathers a unit (or waits for its prefetch) and starts the next one's gather
    Unit& x = units_.at(unit);
    if (!x.whole.defined()) start_gather(unit);
    x.gather.wait();  // a prefetched unit is usually complete by now
    x.refs++;
    // the model's walk goes on to `next`: fetch it while this unit computes
    if (next >= 0 && !units_.at(next).whole.defined()) start_gather(next);
    return x.whole;
    // EXERCISE 03.1 end
}

void GatheredParams::release(int unit, bool again) {
    // EXERCISE 03.1 begin: ZeRO-3's free: release drops the gathered weights when the last user lets go (unless again)
    Unit& x = units_.at(unit);
    CHECK(x.refs > 0, "release(%d) of a unit that is not acquired", unit);
    if (--x.refs > 0 || again) return;  // again: the pass reads it once more, keep the gathered weights
    x = Unit{};                         // frees them
    // EXERCISE 03.1 end
}

bool GatheredParams::idle() const {
    for (const Unit& x : units_)
        if (x.whole.defined()) return false;
    return true;
}

}  // namespace penta
