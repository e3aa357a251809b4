// pp_training.hpp — a dp × pp × tp (+sp, ZeRO-1/2) training run assembled from the flags: what chapter 07's
// program is made of, and the pieces its tests train with, so both train the same way.
//
// Playbook: "Pipeline parallelism". Rank r = tp_i + tp·(dp_i + dp·pp_i) (grid.hpp): pp is the slowest axis, so
// a pipeline's stages may sit on different nodes and only activations cross them. What PP changes:
//   - the model: each stage builds its virtual stages' layers (pipeline_schedule.hpp: stage_slice), the
//     embedding on the stage that runs virtual stage 0, the head on the one that runs the last;
//   - the step: the Trainer's schedule is the PipelineExecutor over this stage's list, its stages the pipeline
//     group (the loss summed over them);
//   - the tensors two stages hold (a tied embedding, DualPipe's mirror copies): PipelineReplicaHooks sums
//     their gradients over the pair.
// Data parallelism (chapter 02, or ZeRO-1/2 of chapter 03) runs over each stage's dp group unchanged: its
// hooks hear before_gradients(i, last) from the executor and reduce once, after the stage's last
// micro-batch. Tensor parallelism (chapters 04/05) cuts each stage's layers as it cuts a whole model.
//   mpirun -np 4 build/bin/07_pipeline_parallel --pp 4 --pp-schedule 1f1b --grad-accum 8
//   mpirun -np 4 build/bin/07_pipeline_parallel --pp 2 --dp 2 --zero 1
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "../04_tensor_parallel/tp_install.hpp"
#include "../04_tensor_parallel/tp_optimizer.hpp"
#include "../common/train_loop.hpp"
#include "pipeline_executor.hpp"
#include "pipeline_schedule.hpp"
#include "tools/pipeline_clock.hpp"
#include "tools/pipeline_replicas.hpp"

namespace penta {

// PP's flags on top of chapter 01's and the parallel ones
struct PipelineFlags {
    int64_t zero = 0;
    std::string schedule = "1f1b";
    int64_t chunks = 1;         // --pp-chunks: model chunks per stage (interleaved)
    std::string layers;         // --pp-layers 3,3,2: layers per virtual stage; empty: even
    float cost_b = 1, cost_w = 1;  // the logical clock's B and W, in units of F (BW = B + W)
    std::string trace;          // --trace FILE: the Chrome trace
    std::string inject_at = "step";  // --inject-at step|first-f: where --inject-failure / --inject-hang strike
};
// registers the flags, parses and validates them (the rules of this chapter: see pp_training.cpp). False when
// --help was given.
bool parse_pipeline_flags(int argc, char** argv, TrainConfig& cfg, PipelineFlags& pf);
// the pipeline's own flags (--pp-schedule ... --trace) on a parser, and their rules alone (the schedule's name,
// --pp-chunks, the clock's costs, the trace file's folder): what chapter 09's program shares with this one
void register_pipeline_flags(Flags& flags, PipelineFlags& pf);
void check_pipeline_flags(const TrainConfig& cfg, const PipelineFlags& pf);
// The plan of --pp-schedule over --pp stages and --grad-accum micro-batches (checked: check_plan), and the
// layers of each virtual stage (--pp-layers, or even); throws naming the flags when they cannot go together.
PipelinePlan pipeline_plan(const TrainConfig& cfg, const PipelineFlags& pf, const LlamaConfig& mc,
                           std::vector<LayerRange>* pieces);

// What a later chapter puts into a stage beside chapter 07's pieces (chapter 09: context parallelism's attention
// core, a MoE layer, the gradients over dp × cp); the defaults are this chapter's own run.
struct StageCores {
    std::shared_ptr<AttentionCore> attention_core;  // null: the model's own (ModelOptions)
    std::shared_ptr<MlpCore> mlp_core;              // null: DenseSwiGLU
    Comm* data = nullptr;                           // the gradients' group (make_tp_optimizer); null: grid.dp()
    Axes data_axes = kAxisDP;                       // the grid axes `data` spans
};

// Everything one rank trains with, built the one way the program and the tests share.
struct PipelineParts {
    // grid: dp × pp × tp (cp 1); the model is built for this rank's stage of the plan, with the tp seams when
    // --tp > 1 (SP's with --sp), ZeRO's options when --zero, and AdamW (ac) and its hooks as chapter 04 builds them
    PipelineParts(const TrainConfig& cfg, const PipelineFlags& pf, const LlamaConfig& mc, ParallelGrid& grid,
                  Device device, const AdamWConfig& ac, const StageCores& cores = {});
    ~PipelineParts();
    Trainer trainer() { return Trainer{*model, *opt.optim, hooks, executor.get(), pp}; }

    PipelinePlan plan;
    std::vector<LayerRange> pieces;  // the layers of each virtual stage
    std::unique_ptr<Model> model;
    TensorParallelSeams seams;  // f/g (or SP) and the vocab-parallel loss when --tp > 1
    std::unique_ptr<PipelineExecutor> executor;
    Comm* pp = nullptr;                               // the pipeline group: the grid's
    TensorParallelOptimizer opt;                      // over dp (chapter 02's all-reduce, or ZeRO)
    std::unique_ptr<PipelineReplicaHooks> replicas;   // a tied model over pp > 1, DualPipe
    std::vector<StepHooks*> hooks;                    // opt's, then replicas
};

class PipelineTraining {
   public:
    // checks the layout before any work, then builds this rank's parts (PipelineParts)
    PipelineTraining(const TrainConfig& cfg, const PipelineFlags& pf);
    ~PipelineTraining();
    void print_header() const;
    // chapter 01's loop; each step line adds this rank's pp MiB and the wall clock's bubble, idle / compute
    // time (mean over the stages)
    StepResult run();
    // rank 0, from the last step of every stage: the timeline, the bubble (logical, with measured costs, wall)
    // beside its formula, the micro-batches in flight and the activations held beside theirs, the bytes sent
    void print_measured();
    // --trace: every rank's spans of the run into one Chrome trace
    void write_trace();

    const TrainConfig cfg;
    const PipelineFlags pf;
    PipeScheduleKind kind;
    Device device;
    LlamaConfig mc;
    std::unique_ptr<ParallelGrid> grid;
    std::unique_ptr<Dataset> data;
    std::unique_ptr<PipelineParts> parts;
};

}  // namespace penta
