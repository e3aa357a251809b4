// pipeline_replicas.hpp — the gradients of tensors that two pipeline stages both hold, summed between them.
//
// Playbook: "Pipeline parallelism" (and Megatron-LM's embedding group). Two cases:
//   - a tied model: the first stage's embedding table is also the last stage's lm_head, so the last stage
//     keeps a replica (model_layout.hpp); each computes a part of the table's gradient;
//   - DualPipe: stage s and its mirror p-1-s hold the same layers (the two copies of the model, one per
//     direction), each computing the gradient of the micro-batches that went its way.
// Both are stages s and p-1-s (the mirror pair; the tied pair is 0 and p-1), and both are marked in the layout:
// the tensor's grad_summed_on has pp. This hook all-reduces those tensors' gradients over the pair in
// before_update, i.e. after the data-parallel hooks have reduced them over dp (or ZeRO has reduced them into
// its shards, which the two stages cut alike: the replica lives in the same unit as the original). Sums
// commute, so the order of the two reductions is free; waiting until the data hooks are done keeps each
// reduction the owner of its buffer. The replica is counted in the gradient norm on one of the two stages
// only (counts_in_grad_norm), and both apply the same update, so the copies stay equal bit for bit.
//   mpirun -np 2 build/bin/07_pipeline_parallel --pp 2 --model small      (small is tied)
#pragma once
#include <memory>
#include <vector>

#include "../../common/grid.hpp"
#include "../../common/training_step.hpp"

namespace penta {

class PipelineReplicaHooks : public StepHooks {
   public:
    // pp: the pipeline group; optimizer: whose gradient (the flat buffer, or its ZeRO shard) is reduced. Builds
    // the mirror pair (a split of pp: collective over it) and checks both stages see the same ranges.
    PipelineReplicaHooks(const Model& model, AdamW& optimizer, Comm& pp);
    // true when some tensor of this model is held by two stages (a tied model over pp > 1, or DualPipe)
    static bool needed(const ParamLayout& layout);

    void before_update() override;
    double bytes() const;  // what this stage's pair group sent so far (ring accounting)

   private:
    AdamW& optim_;
    std::unique_ptr<Comm> pair_;                       // stages s and p-1-s
    std::vector<std::pair<int64_t, int64_t>> spans_;  // (offset, count) in the optimizer's gradient, merged
};

}  // namespace penta
