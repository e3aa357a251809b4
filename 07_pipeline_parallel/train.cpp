// 07_pipeline_parallel/train.cpp — chapter 07: pipeline parallelism. The layers are cut over --pp stages; each
// micro-batch's activations go stage to stage forward and their gradients back, by asynchronous send/recv, in
// the order --pp-schedule gives every stage (afab, 1f1b, interleaved with --pp-chunks, zb1, dualpipe). Composes
// with --dp (or --zero 1/2), --tp and --sp: gradients are synchronised once per step, after the last micro-batch.
//
// Playbook: "Pipeline parallelism". What to watch:
//   - the same loss curve as chapter 01 for the same global batch (--pp changes where layers live, not what is
//     computed);
//   - per step: "pp MiB" this rank sent to its neighbours, "idle/compute %" the bubble on the wall clock (the
//     stages' idle time over their compute time, the playbook's ratio: above 100% when they idle more than work);
//   - after training, the last step as it ran: its timeline on the logical clock (F = 1 unit, B and W as
//     --pp-cost-b / --pp-cost-w say), each stage's bubble beside (p-1)/m, (p-1)/(v·m) or ZB-H1's formula, the
//     micro-batches held at once beside m (AFAB) or p-i (1F1B) and the activations they keep, the bytes sent;
//   - --trace FILE: the run as a Chrome trace, one process per rank (ui.perfetto.dev).
//
//   mpirun -np 2 build/bin/07_pipeline_parallel --pp 2
//   mpirun -np 4 build/bin/07_pipeline_parallel --pp 4 --pp-schedule afab --grad-accum 8
//   mpirun -np 4 build/bin/07_pipeline_parallel --pp 4 --pp-schedule zb1 --grad-accum 8
//   mpirun -np 2 build/bin/07_pipeline_parallel --pp 2 --pp-schedule interleaved --pp-chunks 2 --grad-accum 4
//   mpirun -np 4 build/bin/07_pipeline_parallel --pp 4 --pp-schedule dualpipe --grad-accum 8
//   mpirun -np 4 build/bin/07_pipeline_parallel --pp 2 --dp 2 --zero 1
#include <cstdio>

#include "../common/runtime.hpp"
#include "pp_training.hpp"

using namespace penta;

namespace {

int train(int argc, char** argv) {
    TrainConfig cfg;
    cfg.pp = 2, cfg.grad_accum = 4, cfg.micro_batch = 4;
    cfg.eval_every = 0;  // the evaluation would need every layer on one rank
    PipelineFlags pf;
    if (!parse_pipeline_flags(argc, argv, cfg, pf)) return 0;
    PipelineTraining run(cfg, pf);
    run.print_header();
    run.run();
    // the tables and the trace are of steps that ran: none with --steps 0 (say, only --export-hf), or when --resume
    // starts at --steps; every rank knows alike
    if (run.parts->executor->last_step().ops.empty()) {
        if (world_rank() == 0) std::printf("\nno step ran: no pipeline tables%s\n", run.pf.trace.empty() ? "" : ", no trace");
    } else {
        run.print_measured();
        run.write_trace();
    }
    if (world_rank() == 0)
        std::printf("\nmemory by tag on %s (rank 0):\n%s", device_name(run.device), memory_table(run.device).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, train); }
