// train_loop.hpp — the parts of a training program every chapter shares: resolving --device and --model,
// the held-out evaluation, and the step loop with its log line. Chapter 01's train.cpp runs it with a bare
// Trainer (one device); each later chapter puts its own hooks in the Trainer (training_step.hpp) and adds
// its own fields to the log, so the loop is written once.
//   build/bin/01_single_gpu --model small          (chapter 01)
//   mpirun -np 2 build/bin/02_data_parallel --dp 2  (chapter 02 runs the same loop with DP hooks)
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "config.hpp"
#include "memory_bound.hpp"
#include "metrics.hpp"
#include "tokenizer.hpp"
#include "training_step.hpp"

namespace penta {

Device resolve_device(const std::string& flag_value);  // --device auto|cpu|cuda
// a preset name, a HF config.json path, or a HF folder (its config.json; model_options loads its weights)
LlamaConfig resolve_model(const std::string& flag_value);
// --model, checked against --seq (the model's max_seq) and check_memory_bound on --device (zero: the chapter's
// --zero stage); the files named by --val-data, --tokenizer (with --generate) and --export-hf checked too,
// before any work
LlamaConfig resolve_model(const TrainConfig& cfg, int zero = kZeroUnknown);
// --generate's tokenizer: --tokenizer, else --model DIR's tokenizer.json, else the byte tokenizer; its
// vocabulary must fit the model's
std::unique_ptr<Tokenizer> make_tokenizer(const TrainConfig& cfg, const LlamaConfig& mc);
// the end-of-text ids of a HF folder (generation_config.json or config.json's eos_token_id); none otherwise
std::vector<int32_t> eos_token_ids(const std::string& model);
// the world communicator of --comm on `device`, its blocking waits under --comm-timeout (watchdog.hpp)
std::unique_ptr<Comm> make_world_comm(const TrainConfig& cfg, Device device);
// --recompute, --attention (no parallelism); with --model DIR the weights from DIR's safetensors
ModelOptions model_options(const TrainConfig& cfg);
AdamWConfig adamw_config(const TrainConfig& cfg);    // --lr, --beta1, --beta2, --weight-decay; --steps 0: no state
BatchPlan batch_plan(const TrainConfig& cfg);        // --seq, --micro-batch, --grad-accum on one rank

// Held-out evaluation on sample ids far beyond any training step's, so never trained on.
struct Eval {
    double loss = 0;
    double accuracy = -1;  // exact-match on the addition task; -1 for other data
};
// sequences of held-out data each evaluation runs (one micro-batch)
constexpr int64_t kEvalRows = 32;
// full_logits turns this rank's logits into the whole vocabulary's (TP gathers the vocab shards); empty:
// the logits are already whole. Every rank of a model-parallel group must call it (it communicates).
// Accuracy is measured when --data is the addition task.
Eval evaluate(Model& model, const Dataset& data, const TrainConfig& cfg,
              const std::function<Tensor(const Tensor&)>& full_logits = {});

struct TrainLoop {
    Trainer& trainer;
    const Dataset& data;
    const TrainConfig& cfg;
    BatchPlan plan;
    StepLogConfig log;  // print is forced to world rank 0 only
    std::function<Tensor(const Tensor&)> full_logits;  // see evaluate
    // called after every step on every rank, before the line is printed: a chapter adds its figures
    std::function<void(StepRecord&, const StepResult&)> on_step;
    // every rank of the job (the grid's world), for the straggler report; nullptr: one rank
    Comm* world = nullptr;
};

// Fills loop.log for a model of config mc (the FULL model, whatever shard this rank holds) trained on
// num_devices devices: FLOPs per token (6N + attention), the device's peak, --log-jsonl (rank 0 writes it).
void configure_log(TrainLoop& loop, const LlamaConfig& mc, Device device, int num_devices);
// the line that says what loss a model that learned nothing has (the addition task); rank 0
void print_task_baseline(const TrainConfig& cfg, const LlamaConfig& mc);

// Runs cfg.steps steps (lr from the warmup+cosine schedule), evaluating every cfg.eval_every (on --val-data
// when given), printing every cfg.log_every; honours --inject-failure, --inject-hang and --inject-nan. Then
// --export-hf (every rank writes its part; the grid is the flags' --dp --pp --cp --tp --ep) and --generate.
// Returns the last step's result. With more than one rank, rank 0 prints the straggler report: a step much
// slower than the recent ones, with the rank that worked longest in it (straggler.hpp).
StepResult run_training(TrainLoop& loop);

// the "activations saved by one micro-batch's forward" table: measured beside our formula and the playbook's
void print_activation_table(const Model& model, const TrainConfig& cfg, int64_t measured);

}  // namespace penta
