// mixed_precision.hpp — chapter 11's comparison: the same model trained under each precision policy
// (--precision fp32|bf16|fp16|fp8, common/precision.hpp) from the same weights on the same batches, the
// model-state bytes per parameter each policy holds (measured by the allocator's tags) beside the playbook's
// table, and the loss curves side by side.
//
// Playbook: "Mixed precision training" — bf16 weights with an fp32 master copy and fp32 Adam states cost
// 2 + 2 + 4 + 8 = 16 bytes per parameter (20 with an fp32 gradient buffer), no fewer than fp32's 16: mixed
// precision saves activation memory and compute, not model state. fp16 needs loss scaling (loss_scaler.hpp);
// fp8 needs per-tile scales (fp8.hpp).
//   build/bin/11_mixed_precision --model small --steps 300
// Test: `make test CH=11`.
#pragma once
#include <string>
#include <vector>

#include "../common/config.hpp"
#include "../common/formulas.hpp"
#include "../common/training_step.hpp"

namespace penta {

struct SchemeRun {
    std::string precision;       // fp32, bf16, fp16, fp8
    std::vector<double> losses;  // per step
    ModelStateBytes state;       // params / grads / master / optim bytes the run held (allocator tags)
    int64_t n_params = 0;
    int64_t skipped = 0;         // steps the loss scaler skipped
    float loss_scale = 1;        // its scale after the last step (1: none)
    double seconds = 0;          // wall time of the steps
};

// cfg.steps steps of `precision` on one rank of cfg.device: model cfg.seed, batches of cfg's BatchPlan, cfg's LR
// schedule and clipping. print: a line every cfg.log_every steps.
SchemeRun train_scheme(const TrainConfig& cfg, const LlamaConfig& mc, const Dataset& data, const std::string& precision,
                       bool print);

// bytes per parameter of each run (params, grads, fp32 master, Adam, total), then the playbook's rows
std::string memory_per_param_table(const std::vector<SchemeRun>& runs);
// the runs' loss curves in one ASCII plot (F fp32, b bf16, h fp16, 8 fp8; * where they overlap),
// each column the mean over its steps; then each run's mean loss over its last tenth of steps beside fp32's
std::string loss_curves(const std::vector<SchemeRun>& runs, int width = 72, int height = 16);
// the mean loss over the last `window` steps (the noise of one step's batch averaged out)
double final_loss(const SchemeRun& r, int64_t window);

}  // namespace penta
