// zero.hpp — ZeRO-1, -2 and -3 as the step hooks of a data-parallel training step.
//
// Data parallelism (ch02) keeps a full copy of the model state on every rank: 4Ψ weights + 4Ψ grads
// + 8Ψ AdamW moments in fp32. ZeRO removes the redundancy stage by stage; each rank owns a 1/N shard
// (zero_shard.hpp) and:
//   ZeRO-1  shards the optimizer state. Backward fills the full gradient buffer as in ch01; after it,
//           each unit's gradients are reduce-scattered into the shard (Ψ), AdamW updates the shard, and
//           the updated weights are all-gathered into every rank's full buffer (Ψ).   bytes 2Ψ
//   ZeRO-2  shards the gradients too: no full gradient buffer; each unit is reduce-scattered as soon as
//           backward finishes it (sharded_grads.hpp), then the same update and all-gather.
//                                                            bytes (grad_accum + 1)Ψ, 2Ψ without accumulation
//   ZeRO-3  shards the weights too: no full weight buffer; each unit is all-gathered just before forward
//           and again before backward needs it (zero3_params.hpp), gradients as ZeRO-2, and AdamW
//           updates the weight shard in place — nothing to gather after the step.      bytes 3Ψ
// (Ψ here = (N-1)/N · 4 bytes per parameter: the ring accounting of comm.hpp.) The loss of every rank is
// divided by the global token count (ARCHITECTURE.md §6), so the reduction is a plain SUM, as in ch02.
//
// Memory per rank (fp32, S = this rank's shard elements ≈ Ψ/N; formulas.hpp: zero_model_state_bytes_fp32):
//   ZeRO-1  params 4Ψ   grads 4Ψ   optim 8S        ZeRO-2  params 4Ψ  grads 4S  optim 8S
//   ZeRO-3  params 4S   grads 4S   optim 8S
// With the default precision policy there is no master copy: AdamW updates the fp32 weights themselves.
// With bf16 weights (precision.hpp) each rank keeps the fp32 master of its shard only (Tag::master) — the
// playbook's k = 12 sharded with the optimizer state. Everything transient — gathered units, per-unit
// gradient buffers, the staged shard ZeRO-1/2 update — is tagged Tag::comm, so the model-state tags hold
// exactly the formula and the comm tag's peak shows the working buffers.
// ZeRO composes with tensor parallelism unchanged: a tp rank's flat buffer is just a smaller model, cut
// the same way over its dp group (chapter 04's --zero). Each unit is cut over the group that sums its
// gradients (reduce_groups.hpp): a MoE's experts over edp (chapter 08), the rest over dp.
//   mpirun -np 4 build/bin/03_zero --dp 4 --zero 3
//   mpirun -np 4 build/bin/tests_03 -ts='ch03 np4'      (tests/03_zero/test_zero.cpp)
// Playbook: "Zero Redundancy Optimizer (ZeRO)": ZeRO-1, ZeRO-2, ZeRO-3 (FSDP).
#pragma once
#include <memory>

#include "../common/comm.hpp"
#include "../common/grid.hpp"
#include "../common/training_step.hpp"
#include "sharded_grads.hpp"
#include "zero1_overlap.hpp"
#include "zero3_params.hpp"
#include "zero_shard.hpp"

namespace penta {

enum class ZeroStage { zero1 = 1, zero2 = 2, zero3 = 3 };
ZeroStage parse_zero_stage(int64_t flag_value);  // 1 | 2 | 3; the error names --zero

// What a model trained with `stage` must be built with: ZeRO-2 without a full gradient buffer, ZeRO-3
// without full weights either.
ModelOptions zero_model_options(ZeroStage stage, ModelOptions base = {});

class ZeroHooks : public StepHooks {
   public:
    // Installs the stage's parameter provider / gradient sink on the model (removed in the destructor) and
    // builds AdamW over this rank's shard. The model must have been built with zero_model_options(stage).
    // groups: each unit's group (one dp group for a dense model). grid: the layout the model is part of, for
    // the global gradient norm (every rank counts its own shard's elements, once per tensor-parallel group;
    // one all-reduce over the world); nullptr: dp is the whole job. dp_axes: the grid axes the dp group spans
    // (dp; dp | cp once context parallelism shards over dp × cp): the axes the optimizer's buffer is sharded
    // over.
    ZeroHooks(Model& model, ReduceGroups groups, ZeroStage stage, AdamWConfig cfg, ParallelGrid* grid = nullptr,
              Axes dp_axes = kAxisDP);
    ~ZeroHooks() override;
    ZeroHooks(const ZeroHooks&) = delete;
    ZeroHooks& operator=(const ZeroHooks&) = delete;

    void begin_step() override;
    void finish_gradients() override;
    void before_update() override;
    void after_update() override;

    // ZeRO-1/2: leave the all-gather of the updated weights in flight after each step; the next forward waits for
    // each unit when it acquires it (zero1_overlap.hpp). Off by default.
    void defer_weight_gather();
    // lands the deferred gathers still in flight: before anything reads the full weights outside the model's walk
    void finish_weight_gather();
    void settle_weights() override { finish_weight_gather(); }  // the loop's evaluation, saves, export
    // ZeRO-1/2: what waiting for the weight all-gathers cost this rank so far (at once, or deferred)
    const GatherWaits& weight_gather_waits() const { return deferred_ ? deferred_->waits() : waits_; }

    // the full flat weights (n_params) on every rank, Tag::workspace: for tests and checkpoints.
    // ZeRO-3 all-gathers them (the dp counters see those bytes).
    Tensor gather_params();

    ZeroStage stage() const { return stage_; }
    const UnitShards& shards() const { return shards_; }
    // the shard's optimizer: the trainer steps it; moments and step count (checkpoints)
    AdamW& optimizer() { return *optim_; }
    // what the groups' Comms counted from begin_step to the end of after_update of the last step
    const CommCounters& last_step_traffic() const { return last_step_; }

   private:
    Model& model_;
    ReduceGroups groups_;
    ZeroStage stage_;
    UnitShards shards_;
    Tensor param_shard_;  // ZeRO-3: this rank's weights (Tag::params); ZeRO-1/2: staged per step (Tag::comm)
    Tensor grad_shard_;   // ZeRO-2/3: this rank's gradients (Tag::grads); ZeRO-1: reduced per step (Tag::comm)
    std::unique_ptr<ShardedGradients> sink_;   // ZeRO-2/3
    std::unique_ptr<GatheredParams> gathered_;  // ZeRO-3
    std::unique_ptr<DeferredWeights> deferred_;  // ZeRO-1/2 with defer_weight_gather()
    GatherWaits waits_;                          // ZeRO-1/2 waiting at once
    std::unique_ptr<AdamW> optim_;              // over the shard
    CommCounters at_begin_, last_step_;
};

}  // namespace penta
