// zero3_params.hpp — ZeRO-3's parameter provider: a unit's weights exist in full only while it computes.
//
// Each rank keeps its shard of the weights (zero_shard.hpp). acquire(unit, next) all-gathers that unit into
// a temporary buffer (Tag::comm, so the memory table shows it apart from the sharded model state) and
// release(unit) frees it. While a unit computes, the NEXT one is already being gathered (prefetch): the
// model says which unit its walk acquires next (spine.hpp), so the prefetch follows whatever the model
// runs — forward (embedding, layer 0, ..., head), the backward's input-gradient pass (head, layer L-1,
// ..., layer 0; the embedding's backward reads no weights), a pipeline stage's slice, 1F1B's alternation.
// A unit is gathered only when it is not already gathered or in flight, so every unit is gathered exactly
// once per forward and once per backward: the bytes are Ψ in forward and Ψ - (untied embedding) in
// backward (formulas.hpp: zero_step_bytes).
//
// Tied embeddings: the head reads the embedding table again at the end of forward. Gathering it twice
// would cost V·h more per step; the model releases the embedding with again = true, and the table stays
// gathered until the head releases it (a memory-for-traffic choice: V·h transient during forward). In
// backward the head gathers it (the lm_head gradient needs the table), so the tied model's backward
// gathers Ψ too.
//
// Playbook: "ZeRO-3: Adding parameter partitioning" — "all-gather on demand ... prefetching the next
// layer's parameters while the current layer computes". Test: `make test CH=03`.
#pragma once
#include <vector>

#include "../common/spine.hpp"
#include "zero_shard.hpp"

namespace penta {

class GatheredParams : public ParamProvider {
   public:
    // shard: this rank's weight shard (shares the buffer the optimizer updates), in the parameter dtype; each
    // unit is all-gathered over its group (one dp group for a dense model)
    GatheredParams(const UnitShards& shards, ReduceGroups groups, Tensor shard);
    Tensor acquire(int unit, int next) override;
    void release(int unit, bool again) override;
    bool idle() const;  // nothing gathered or in flight (true between passes)
    int64_t gathers() const { return gathers_; }  // all-gathers started, prefetches included

   private:
    struct Unit {
        Tensor whole;       // (unit numel) the gathered weights, Tag::comm; undefined when not gathered
        CommHandle gather;  // pending while the all-gather is in flight
        int refs = 0;  // acquires not yet released; at 0 the unit is freed, unless released with again
    };
    void start_gather(int unit);

    const UnitShards& shards_;
    ReduceGroups groups_;
    Tensor shard_;
    std::vector<Unit> units_;
    int64_t gathers_ = 0;
};

}  // namespace penta
