// zero3_params.hpp — ZeRO-3's parameter provider: a unit's weights exist in full only while it computes.
//
// Each rank keeps its shard of the weights (zero_shard.hpp). acquire(unit) all-gathers that unit into a
// temporary buffer (Tag::comm, so the memory table shows it apart from the sharded model state) and
// release(unit) frees it. While a unit computes, the NEXT one is already being gathered (prefetch):
//   forward   acquire(u) starts the gather of u + 1  (embedding, layer 0, ..., head)
//   backward  acquire(u) starts the gather of u - 1  (head, layer L-1, ..., layer 0; the embedding
//             backward reads only tokens and gradients, never the table, so it is not gathered)
// A prefetch starts only on the FIRST acquire of a gathered unit and only for a unit not already gathered
// or in flight, so every unit is gathered exactly once per forward and once per backward: the bytes
// are Ψ in forward and Ψ - (untied embedding) in backward (formulas.hpp: zero_step_bytes).
//
// Tied embeddings: the head reads the embedding table again at the end of forward. Gathering it twice
// would cost V·h more per step; instead the table stays gathered from the embedding forward until the head
// releases it (a memory-for-traffic choice: V·h transient during forward). In backward the head gathers
// it (the lm_head gradient needs the table), so the tied model's backward gathers Ψ too.
//
// Playbook: "ZeRO-3: Adding parameter partitioning" — "all-gather on demand ... prefetching the next
// layer's parameters while the current layer computes". Test: `mpirun -np 2 build/bin/tests_03 -ts='ch03 np2'`.
#pragma once
#include <vector>

#include "../common/spine.hpp"
#include "zero_shard.hpp"

namespace penta {

class GatheredParams : public ParamProvider {
   public:
    // shard: this rank's weight shard (shares the buffer the optimizer updates)
    GatheredParams(const UnitShards& shards, Comm& dp, Tensor shard, bool tied_embeddings);
    Tensor acquire(int unit) override;
    void release(int unit) override;
    // the direction prefetch follows: set by ZeroHooks before each backward, reset when backward ends
    void set_backward(bool backward) { backward_ = backward; }
    bool idle() const;  // nothing gathered or in flight (true between passes)

   private:
    struct Unit {
        Tensor whole;       // (unit numel) the gathered weights, Tag::comm; undefined when not gathered
        CommHandle gather;  // pending while the all-gather is in flight
        int refs = 0;
        bool used = false;  // acquired since it was gathered (its prefetch has been started)
    };
    void start_gather(int unit);
    int next_unit(int unit) const;  // what to prefetch after `unit` in the current direction, -1: none

    const UnitShards& shards_;
    Comm& dp_;
    Tensor shard_;
    bool tied_;
    bool backward_ = false;
    bool embedding_pinned_ = false;  // tied: kept gathered from the embedding forward to the head's release
    std::vector<Unit> units_;
};

}  // namespace penta
