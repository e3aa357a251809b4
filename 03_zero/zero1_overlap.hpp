// zero1_overlap.hpp — ZeRO-1/2's all-gather of the updated weights overlapped with the next forward.
//
// After the optimizer step every rank holds its updated shard; the other ranks' pieces arrive by one all-gather
// per unit. ZeroHooks waits for all of them at once (after_update). With DeferredWeights the gathers are left in
// flight instead, and the next forward waits for each unit only when it acquires it (a ParamProvider over the
// full weights): unit u's gather overlaps the compute of the units before it, as ZeRO-3's prefetch does — seed
// 000's "all-gather ... 与 forward 重叠（每 layer 用之前才 gather）".
// Anything that reads model.params() outside the model's walk (a checkpoint, an export) calls finish_all() first:
// ZeroHooks does before the next update and in gather_params(), run_training through StepHooks::settle_weights
// (03_zero/train.cpp's --zero-defer-gather).
// GatherWaits counts what the waits cost either way: the gathers still in flight when the rank had to have them
// (exposed), and the time it was blocked in those waits.
// Test: tests/03_zero/test_zero3_overlap.cpp (`ZeRO-1 deferred gather ...`, the exposed waits on the logical clock).
//   mpirun -np 2 build/bin/03_zero --dp 2 --zero 1 --zero-defer-gather
#pragma once
#include <vector>

#include "../common/model.hpp"
#include "zero_shard.hpp"

namespace penta {

struct GatherWaits {
    int64_t waited = 0;   // unit gathers waited for
    int64_t exposed = 0;  // of them, still in flight when waited for: the rank stopped for them
    double seconds = 0;   // time blocked in those waits (comm_blocked_seconds)
    void wait(CommHandle& h);  // waits for h (nothing if it was waited for already), counting
};

class DeferredWeights : public ParamProvider {
   public:
    DeferredWeights(Model& model, const UnitShards& shards) : model_(model), shards_(shards) {}
    // every unit's all-gather from `staged` (this rank's updated shard, kept alive until its gather ends) into
    // the model's full weights, left in flight
    void start(const ReduceGroups& groups, Tensor staged);
    Tensor acquire(int unit, int next) override;  // waits for this unit's gather, then its full weights
    void release(int, bool) override {}
    void finish_all();  // waits for every gather still in flight
    bool pending() const;
    const GatherWaits& waits() const { return waits_; }

   private:
    Model& model_;
    const UnitShards& shards_;
    std::vector<CommHandle> inflight_;  // by unit
    Tensor staged_;
    GatherWaits waits_;
};

}  // namespace penta
