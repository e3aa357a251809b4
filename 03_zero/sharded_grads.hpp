// sharded_grads.hpp — ZeRO-2/3's gradient sink: no rank keeps the whole gradient buffer.
//
// Backward asks for a unit's gradients (grads(unit)) and gets a zeroed buffer of that unit only
// (Tag::comm: it is transient). When backward says the unit is final (layer_grads_ready), its
// reduce-scatter starts at once — each rank receives the sum over ranks of ITS part of the unit — and the
// buffer is dropped when that finishes; backward meanwhile computes the next (earlier) layer, so the
// communication overlaps compute as DP's buckets do (ch02). The received part is ADDED into this rank's
// persistent gradient shard (Tag::grads, zero_shard.hpp), so gradient accumulation over micro-batches
// reduce-scatters every micro-batch (grad_accum × Ψ per step: the price of not holding Ψ gradients).
//
// Tied embeddings: the head's backward writes the lm_head gradient into the EMBEDDING unit's buffer, and
// the embedding backward adds to it later; the buffer lives from the first grads(0) to layer_grads_ready(0),
// so the embedding unit is reduce-scattered once, with both contributions.
//
// Playbook: "ZeRO-2: Adding gradient partitioning" ("we only need to keep the gradient shard ... we do a
// reduce-scatter instead of an all-reduce"). Test: `make test CH=03`.
#pragma once
#include <deque>
#include <map>

#include "../common/spine.hpp"
#include "zero_shard.hpp"

namespace penta {

class ShardedGradients : public GradientSink {
   public:
    // shard: this rank's gradient shard (shards.numel() elements), zeroed by the owner before a step; each
    // unit is reduce-scattered over its group (one dp group for a dense model)
    ShardedGradients(const UnitShards& shards, ReduceGroups groups, Tensor shard);
    Tensor grads(int unit) override;
    void layer_grads_ready(int unit) override;
    // finishes every reduce-scatter still in flight and adds it into the shard
    void wait_all();

    static constexpr size_t kMaxInFlight = 2;  // reduce-scatters in flight at once

   private:
    struct InFlight {
        int unit;
        Tensor whole, part;  // the unit's gradients (kept alive for the send) and this rank's summed part
        CommHandle handle;
    };
    void finish(InFlight& f);  // shard piece += part

    const UnitShards& shards_;
    ReduceGroups groups_;
    Tensor shard_;
    std::map<int, Tensor> open_;       // units whose gradients backward is still writing
    std::deque<InFlight> in_flight_;   // started reduce-scatters, oldest first
};

}  // namespace penta
