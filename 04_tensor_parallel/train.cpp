// 04_tensor_parallel/train.cpp — chapter 04: the chapter-01 training with every matrix split over --tp
// ranks (Megatron-LM tensor parallelism), optionally replicated over --dp ranks with chapter 02's
// all-reduce or chapter 03's ZeRO-1/2/3.
//
// Playbook: "Tensor parallelism". What to watch:
//   - the same loss curve as chapter 01 for the same global batch, whatever --tp says (each rank holds
//     1/tp of the heads, of the MLP columns and of the vocabulary);
//   - "tp MiB" on each step line: what this rank's tp group sent in the step (f/g in every layer, the
//     embedding's g, the vocab-parallel loss's 3 floats per token, and evaluation's vocab gather);
//   - at the end, the bytes one micro-batch's forward and backward sent per layer, counted by Comm,
//     beside the formula 8(t-1)/t · s b h elements (formulas.hpp: tp_layer_comm_elements);
//   - per rank, the model-state bytes beside the ZeRO formula applied to the tp shard.
//
//   mpirun -np 2 build/bin/04_tensor_parallel --tp 2
//   mpirun -np 4 build/bin/04_tensor_parallel --tp 4 --steps 50
//   mpirun -np 4 build/bin/04_tensor_parallel --tp 2 --dp 2 --zero 1 --micro-batch 8
//   mpirun -np 4 build/bin/04_tensor_parallel --tp 2 --dp 2 --zero 3 --micro-batch 8
#include <cstdio>

#include "../common/runtime.hpp"
#include "tp_training.hpp"

using namespace penta;

namespace {

int train(int argc, char** argv) {
    TrainConfig cfg;
    int64_t zero = 0;
    if (!parse_tensor_parallel_flags(argc, argv, "04_tensor_parallel",
                                     "Chapter 04: tensor parallelism over --tp ranks, data parallelism (or ZeRO) over "
                                     "--dp (playbook: Tensor parallelism).",
                                     cfg, zero))
        return 0;
    CHECK(!cfg.sp, "--sp is sequence parallelism, chapter 05: mpirun -np %ld build/bin/05_sequence_parallel --tp %ld --sp",
          (long)(cfg.dp * cfg.tp), (long)cfg.tp);

    TensorParallelTraining run(cfg, zero);
    run.print_header("04_tensor_parallel");
    std::vector<LayerTraffic::Bytes> layers = run.measure_micro_batch();
    run.run();
    run.print_traffic(layers, "f and g");
    run.print_model_state();
    if (world_rank() == 0)
        std::printf("\nmemory by tag on %s (rank 0):\n%s", device_name(run.device), memory_table(run.device).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, train); }
