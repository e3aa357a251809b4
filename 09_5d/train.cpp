// 09_5d/train.cpp — chapter 09: the 5D trainer. --dp (with --zero 1/2/3), --tp (with --sp), --cp, --pp (any
// --pp-schedule) and --ep together in one run, each axis entering through the seam its chapter built (five_d.hpp);
// --config run.json gives the same flags as a JSON object. Before any work every rule of the layout is checked
// (the error names the flags and the rule), tp groups must sit inside a node (placement.hpp).
//
// Playbook: "5D parallelism in a nutshell", "Finding the best training configuration". What to watch:
//   - the layout table (rank -> dp/pp/cp/tp/ep coordinates, node, GPU), memory per rank by formula, and after
//     step 1 the same memory measured beside it and the bytes each rank sent on each axis;
//   - the loss and the addition task's accuracy (acc: measured on the head stage) as it trains — the same curve
//     as one rank for the same global batch, whatever the layout.
//
//   make run                                                  (8 ranks: dp 2 × tp 2 × pp 2, 1F1B)
//   mpirun -np 8 build/bin/09_5d --dp 2 --tp 2 --pp 2
//   mpirun -np 8 build/bin/09_5d --cp 2 --tp 2 --pp 2 --pp-schedule zb1
//   mpirun -np 16 build/bin/09_5d --model tiny-moe --dp 2 --pp 2 --cp 2 --tp 2 --ep 2 --moe-balance bias
//   mpirun -np 8 build/bin/09_5d --config run.json
#include <cstdio>

#include "../common/runtime.hpp"
#include "five_d_training.hpp"

using namespace penta;

namespace {

int train(int argc, char** argv) {
    TrainConfig cfg;
    cfg.grad_accum = 4, cfg.micro_batch = 4;
    cfg.eval_every = 0;  // a pipeline's layers are on many ranks: acc is measured on the head stage instead
    FiveDFlags f;
    if (!parse_5d_flags(argc, argv, cfg, f)) return 0;
    FiveDTraining run(cfg, f);
    run.print_header();
    run.print_layout();
    run.print_memory_predicted();
    run.run();
    if (world_rank() == 0)
        std::printf("\nmemory by tag on %s (rank 0):\n%s", device_name(run.device), memory_table(run.device).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, train); }
