// five_d_training.hpp — chapter 09's program as a class: the layout checked before any work, the parts built
// (five_d.hpp), and the three tables the 5D playbook section asks a run to show.
//
// Playbook: "5D parallelism", "Finding the best training configuration". At start, rank 0 prints
//   - the layout table: every rank's coordinates (dp, pp, cp, tp; ep, edp), its node and GPU (placement.hpp)
//     and its stage's layers;
//   - the memory each rank will hold, as the layout planner predicts it (planner.hpp: plan::predict_rank, with the
//     run's precision): model state (params, grads, master and AdamW's moments) from ZeRO's per-unit shards over
//     dp × cp (experts over edp), and the activations the stage holds at most between two ops of its schedule;
// and after the first step the same memory measured (the allocator's tags; the executor's record of what each op
// left held) beside it, and the bytes each rank sent on each axis's group in that step (Comm's counters: tp, cp,
// pp with the pair sum of the tensors two stages hold, ep, dp × cp for dense gradients, edp for the experts')
// beside the planner's; on more than one node, the same bytes split into those sent inside a node and those sent
// by groups that span nodes (tests/09_5d/cluster_test.sh runs it on two namespace "nodes"). Each step line adds the addition task's accuracy measured on the head stage
// (task_meter.hpp).
//   mpirun -np 8 build/bin/09_5d --dp 2 --tp 2 --pp 2 --pp-schedule 1f1b
#pragma once
#include <memory>

#include "five_d.hpp"
#include "placement.hpp"
#include "planner.hpp"
#include "task_meter.hpp"

namespace penta {

class FiveDTraining {
   public:
    // every rule first (check_5d_layout, then placement: one scalar gather), then this rank's parts
    FiveDTraining(const TrainConfig& cfg, const FiveDFlags& f);
    ~FiveDTraining();
    void print_header() const;
    void print_layout() const;            // the layout table (rank 0; every rank's row computed from the shape)
    void print_memory_predicted();        // collective: the planner's prediction per rank
    StepResult run();                     // chapter 01's loop; after step 1 the measured memory and the bytes per axis

    const TrainConfig cfg;
    const FiveDFlags flags;
    Device device;
    LlamaConfig mc;
    Placement placement;
    std::unique_ptr<ParallelGrid> grid;
    std::unique_ptr<Dataset> data;
    std::unique_ptr<FiveDParts> parts;

   private:
    plan::RankPrediction predict() const;  // this rank's, by the planner, for this run's layout and precision
    // collective: axis_bytes per axes() column; held: the most the executor's record shows held after an op
    // (device + host); peak: the allocator's Tag::activations peak in step 1
    void print_measured(const std::vector<double>& axis_bytes, int64_t held, int64_t peak);
    // collective, with more than one node: each rank's bytes (per axis, per rank: bytes[axis][rank]) split into
    // those its groups sent inside its node and those sent by groups that span nodes (across: this rank's, per axis)
    void print_node_split(const std::vector<bool>& across, const std::vector<std::vector<double>>& bytes);
    std::unique_ptr<LocalCrossEntropy> local_loss_;
    std::unique_ptr<TaskMeter> meter_;    // the head stage, on the addition task, cp 1
};

}  // namespace penta
