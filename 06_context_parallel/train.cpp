// 06_context_parallel/train.cpp — chapter 06: context parallelism. Every sequence is cut over --cp ranks;
// each rank keeps only its tokens' activations, and attention brings the other ranks' keys and values by a
// ring of send/recv overlapped with compute (or one all-gather). Composes with --dp (or --zero 1-3), --tp and
// --sp: the gradients are reduced over dp × cp.
//
// Playbook: "Context parallelism". What to watch:
//   - the same loss curve as chapter 01 for the same global batch (--cp changes where tokens live, not what
//     is computed);
//   - before training, one micro-batch measured: the ring diagram (which block each rank computed at each
//     step), the attention blocks per rank beside the causal formula (contiguous: rank r has r+1; zig-zag:
//     every rank 2cp+1), the bytes each rank sent beside (cp-1)M forward and (2cp-1)M backward (ring) or
//     2(cp-1)M (allgather), the time waited for K/V, and the activations at s/cp tokens;
//   - per step: the cp group's MiB, the ms waited for K/V, the share of K/V transfers hidden behind attention.
//
//   mpirun -np 2 build/bin/06_context_parallel --cp 2
//   mpirun -np 4 build/bin/06_context_parallel --cp 4 --cp-shard contiguous
//   mpirun -np 4 build/bin/06_context_parallel --cp 4 --cp-attn allgather
//   mpirun -np 4 build/bin/06_context_parallel --cp 2 --tp 2 --sp
//   mpirun -np 4 build/bin/06_context_parallel --cp 2 --dp 2 --zero 3
#include <cstdio>

#include "../common/runtime.hpp"
#include "cp_training.hpp"

using namespace penta;

namespace {

int train(int argc, char** argv) {
    TrainConfig cfg;
    cfg.cp = 2;
    ContextParallelFlags cpf;
    if (!parse_context_parallel_flags(argc, argv, cfg, cpf)) return 0;
    ContextParallelTraining run(cfg, cpf);
    run.print_header();
    run.print_measured(run.measure_micro_batch());
    run.run();
    if (world_rank() == 0)
        std::printf("\nmemory by tag on %s (rank 0):\n%s", device_name(run.device), memory_table(run.device).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, train); }
