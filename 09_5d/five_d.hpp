// five_d.hpp — one training run composing all five axes: dp (+ZeRO-1/2/3), tp (+sp), cp, pp (every schedule) and
// ep, assembled from the earlier chapters' own pieces, and the rules a layout must keep.
//
// Playbook: "5D parallelism in a nutshell". Rank r = tp_i + tp·(cp_i + cp·(dp_i + dp·pp_i)); ep is carved from the
// dp × cp plane (grid.hpp). Nothing here computes: each axis enters through the seam its chapter built, and
// this file only hands each seam its piece —
//   pp   chapter 07's PipelineParts: the stage's slice of the model, the PipelineExecutor running --pp-schedule's
//        list, the pipeline group summing the loss, the replica hooks (a tied table, DualPipe); with --pp 1 the same executor runs
//        the one stage's list;
//   tp   chapters 04/05, inside PipelineParts: the layout's shards, f/g or SP's boundary, the vocab-parallel loss;
//   cp   chapter 06: the ContextParallelAttention core (StageCores::attention_core) and its BatchPlan (each cp
//        rank its chunks of the replica's rows, the loss summed over dp × cp);
//   ep   chapter 08: the MoeLayer on grid.ep() (StageCores::mlp_core) and its balance hook;
//   dp   chapters 02/03 through chapter 04's make_tp_optimizer over dp × cp (StageCores::data), experts over edp
//        (reduce_groups.hpp): DP's buckets or ZeRO's shards.
// The program (train.cpp, five_d_training.hpp) and the tests (tests/09_5d/five_d_testing.cpp) build the same parts.
//   mpirun -np 8 build/bin/09_5d --dp 2 --tp 2 --pp 2
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../06_context_parallel/cp_training.hpp"
#include "../07_pipeline_parallel/pp_training.hpp"
#include "../08_expert_parallel/ep_training.hpp"

namespace penta {

// chapter 09's flags beyond TrainConfig's: each chapter's own, shared by name (--zero once for all)
struct FiveDFlags {
    int64_t zero = 0;
    PipelineFlags pp;          // --pp-schedule ... (its zero is this zero)
    ContextParallelFlags cp;   // --cp-shard, --cp-attn
    ExpertParallelFlags moe;   // --moe-balance ... (a MoE model only)
    bool force_tp_across_nodes = false;
    std::string config;        // --config run.json: the same keys as the flags
};

// --config FILE read into flags: each key of FILE's JSON object becomes --key=value, parsed before the command
// line's own flags (so those override it) and checked as flags are (an unknown one is refused), an error naming
// the file and the key. A "config" key, or --config twice, is refused. `rest`: argv's other arguments.
struct ConfigFlags {
    std::string file;                                      // "": no --config
    std::vector<std::pair<std::string, std::string>> keys; // (the file's key, "--name=value")
    std::vector<std::string> rest;
};
ConfigFlags expand_config_flags(int argc, char** argv);

// registers every flag, parses (with --config expanded) and checks what needs no model; false after --help
bool parse_5d_flags(int argc, char** argv, TrainConfig& cfg, FiveDFlags& f);
// --model, dense or a mixture of experts (then with --moe-router / --moe-shared applied)
LlamaConfig resolve_5d_model(const TrainConfig& cfg, const FiveDFlags& f);
GridShape shape_of(const TrainConfig& cfg);
// Every rule of a layout that needs no other rank, checked before any work; each error names the flags and the
// rule: the grid's (validate_grid), the schedule's and the layer split's (chapter 07), cp's sequence and SP's
// token blocks (chapter 06), the experts' (chapter 08), and the ones only composing adds (see five_d.cpp).
void check_5d_layout(const TrainConfig& cfg, const FiveDFlags& f, const LlamaConfig& mc, int world_size);

// Everything one rank trains with (the program and the tests build it this one way).
struct FiveDParts {
    FiveDParts(const TrainConfig& cfg, const FiveDFlags& f, const LlamaConfig& mc, ParallelGrid& grid, Device device,
               const AdamWConfig& ac);
    ~FiveDParts();
    Trainer trainer() { Trainer t = stage->trainer(); t.hooks = hooks; return t; }
    Model& model() { return *stage->model; }
    AdamW& optim() { return *stage->opt.optim; }

    BatchPlan plan;                                       // chapter 02's rows; chapter 06's chunks when cp > 1
    std::shared_ptr<ContextParallelAttention> attention;  // cp > 1
    std::shared_ptr<MoeLayer> moe;                        // a MoE model
    std::unique_ptr<PipelineParts> stage;                 // the model, tp seams, schedule, link, optimizer
    std::unique_ptr<ExpertBalanceHooks> balance;          // a MoE model
    std::vector<StepHooks*> hooks;                        // the stage's, then the balance hook
};

}  // namespace penta
