// sharded_grads.cpp — ZeRO-2/3's per-unit reduce-scatter of gradients (sharded_grads.hpp).
// Playbook: "ZeRO-2: adding gradient partitioning". Test: `mpirun -np 2 build/bin/tests_03 -ts='ch03 np2'`.
#include "sharded_grads.hpp"

#include "../common/ops.hpp"

namespace penta {

ShardedGradients::ShardedGradients(const UnitShards& shards, ReduceGroups groups, Tensor shard)
    : shards_(shards), groups_(groups), shard_(std::move(shard)) {
    CHECK(shard_.numel() == shards.numel(), "gradient shard has %lld elements, the shard layout %lld",
          (long long)shard_.numel(), (long long)shards.numel());
}

Tensor ShardedGradients::grads(int unit) {
    Tensor& g = open_[unit];
    if (!g.defined()) g = Tensor::zeros({shards_.unit(unit).numel}, shard_.dtype, shard_.device(), Tag::comm);  // (unit)
    return g;
}

void ShardedGradients::layer_grads_ready(int unit) {
    // EXERCISE 03.2 begin: ZeRO-2's gradient sharding: when a unit's gradients are ready, start its reduce-scatter; fold in the finished ones
    auto it = open_.find(unit);
    CHECK(it != open_.end(), "layer_grads_ready(%d) without gradients written to that unit", unit);
    InFlight f{unit, it->second, Tensor(), CommHandle()};
    open_.erase(it);
    f.part = Tensor::empty({shards_.piece(unit).count}, shard_.dtype, shard_.device(), Tag::comm);
    f.handle = shards_.group(groups_, unit).reduce_scatter_async(f.whole, f.part);  // (unit) summed over ranks -> my part
    in_flight_.push_back(std::move(f));
    // let MPI progress the earlier ones while backward goes on; fold in those that are done, in order.
    // Each one in flight holds a whole unit of gradients, so beyond kMaxInFlight wait for the oldest:
    // that bounds the transient memory, as DeepSpeed's reduce_bucket_size does.
    while (!in_flight_.empty() && (in_flight_.size() > kMaxInFlight || in_flight_.front().handle.test())) {
        in_flight_.front().handle.wait();
        finish(in_flight_.front());
        in_flight_.pop_front();
    }
    // EXERCISE 03.2 end
}

void ShardedGradients::finish(InFlight& f) {
    // EXERCISE 03.2 begin: ZeRO-2: a finished reduce-scatter adds this rank's part into its gradient shard
    Tensor dst = shards_.piece_of(shard_, f.unit);
    add_inplace(dst, f.part);  // accumulates over micro-batches
    // EXERCISE 03.2 end
}

void ShardedGradients::wait_all() {
    CHECK(open_.empty(), "%zu units have gradients that backward never declared ready", open_.size());
    for (InFlight& f : in_flight_) {
        f.handle.wait();
        finish(f);
    }
    in_flight_.clear();
}

}  // namespace penta
