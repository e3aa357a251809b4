// 08_expert_parallel/train.cpp — chapter 08: a mixture of experts. Each MoE layer's router sends every token
// to k of its E SwiGLU experts; with --ep the experts are spread over ep ranks (carved from --dp) and the
// tokens travel to them and back by all-to-all. Composes with --tp (--sp) and --zero 1-3: the experts'
// gradients are summed over edp (the ranks holding the same experts), the rest over dp.
//
// Playbook: "Expert parallelism". What to watch:
//   - the same loss curve as one rank for the same global batch, whatever --ep says (with --moe-capacity the
//     same copies are dropped too: the capacity is per sequence);
//   - before training, one micro-batch measured: the copies each ep rank sends to each, the load per expert,
//     and the all-to-all bytes each rank sent beside the formula for that routing;
//   - per step: the balance loss (aux), the copies dropped, MaxVio (max load / mean - 1), the balance score
//     (1 = even), the ep group's MiB, and under the line the load of every expert (all MoE layers, the whole
//     global batch) as bars and as multiples of the mean; --log-jsonl writes the loads of every layer;
//   - --moe-balance none | aux | bias: how evenly the experts end up loaded.
//
//   mpirun -np 2 build/bin/08_expert_parallel --dp 2 --ep 2
//   mpirun -np 4 build/bin/08_expert_parallel --dp 4 --ep 4 --moe-balance bias --moe-bias-rate 0.01
//   mpirun -np 4 build/bin/08_expert_parallel --dp 2 --tp 2 --ep 2 --sp
//   mpirun -np 4 build/bin/08_expert_parallel --dp 4 --ep 2 --zero 3 --moe-capacity 1.25
//   build/bin/08_expert_parallel --dp 1 --ep 1 --dump-reference /tmp/moe && /usr/bin/python3 tools/torch_moe.py /tmp/moe
#include <cstdio>

#include "../common/runtime.hpp"
#include "ep_training.hpp"
#include "moe_reference_dump.hpp"

using namespace penta;

namespace {

int train(int argc, char** argv) {
    TrainConfig cfg;
    cfg.model = "tiny-moe";
    cfg.dp = 2, cfg.ep = 2;
    ExpertParallelFlags flags;
    if (!parse_expert_parallel_flags(argc, argv, cfg, flags)) return 0;
    ExpertParallelTraining run(cfg, flags);
    if (!cfg.dump_reference.empty()) {  // the check against Mixtral's block in PyTorch (tools/torch_moe.py)
        dump_moe_reference(*run.model, *run.moe, *run.data, cfg, cfg.dump_reference);
        return 0;
    }
    run.print_header();
    run.print_measured(run.measure_micro_batch());
    run.run();
    if (world_rank() == 0)
        std::printf("\nmemory by tag on %s (rank 0):\n%s", device_name(run.device), memory_table(run.device).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, train); }
