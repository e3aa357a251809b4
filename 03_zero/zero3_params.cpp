// zero3_params.cpp — ZeRO-3's all-gather on demand with prefetch (zero3_params.hpp).
// Playbook: "ZeRO-3: adding parameter partitioning". Test: `mpirun -np 2 build/bin/tests_03 -ts='ch03 np2'`.
#include "zero3_params.hpp"

namespace penta {

GatheredParams::GatheredParams(const UnitShards& shards, Comm& dp, Tensor shard, bool tied_embeddings)
    : shards_(shards), dp_(dp), shard_(std::move(shard)), tied_(tied_embeddings), units_(shards.units()) {}

void GatheredParams::start_gather(int unit) {
    Unit& x = units_[unit];
    x.whole = Tensor::empty({shards_.unit(unit).numel}, DType::f32, shard_.device(), Tag::comm);  // (unit)
    x.gather = dp_.all_gather_async(shards_.piece_of(shard_, unit), x.whole);
}

int GatheredParams::next_unit(int unit) const {
    const int head = shards_.units() - 1;
    if (!backward_) return unit < head ? unit + 1 : -1;
    return unit > 1 ? unit - 1 : -1;  // never the embedding (unit 0): its backward does not read weights
}

Tensor GatheredParams::acquire(int unit) {
    Unit& x = units_.at(unit);
    if (!x.whole.defined()) start_gather(unit);
    x.gather.wait();  // a prefetched unit is usually complete by now
    x.refs++;
    if (!x.used) {
        x.used = true;
        const int next = next_unit(unit);
        if (next >= 0 && !units_[next].whole.defined()) start_gather(next);
        if (tied_ && unit == 0 && !backward_) {  // the head will read the table again: keep it
            embedding_pinned_ = true;
            x.refs++;
        }
    }
    return x.whole;
}

void GatheredParams::release(int unit) {
    Unit& x = units_.at(unit);
    CHECK(x.refs > 0, "release(%d) of a unit that is not acquired", unit);
    if (--x.refs == 0) x = Unit{};  // frees the gathered weights
    if (embedding_pinned_ && unit == shards_.units() - 1) {  // the head is done with the tied table
        embedding_pinned_ = false;
        release(0);
    }
}

bool GatheredParams::idle() const {
    for (const Unit& x : units_)
        if (x.whole.defined()) return false;
    return true;
}

}  // namespace penta
