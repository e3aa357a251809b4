// tp_optimizer.hpp — the optimizer and reduction hooks of a model cut by tensor parallelism, over its data
// axis: chapter 02's all-reduce or chapter 03's ZeRO-1/2/3, on a tp shard's flat buffer as on a whole one.
//
// Playbook: "Tensor parallelism", with "Data parallelism" and "ZeRO" (Megatron-LM's combination). A tp shard
// is just a smaller flat buffer, so nothing here is specific to one tp rank; the chapters after 04 (context,
// pipeline, expert parallelism and 5D) build their optimizer with it too.
//   mpirun -np 4 build/bin/04_tensor_parallel --tp 2 --dp 2 --zero 3
// Test: `make test CH=04`.
#pragma once
#include <memory>
#include <vector>

#include "../02_data_parallel/data_parallel.hpp"
#include "../03_zero/zero.hpp"
#include "../common/grid.hpp"

namespace penta {

// The optimizer side of a dp × tp run, built one way for the programs (TensorParallelTraining; chapters
// 06-09's runs) and the tests (tests/04_tensor_parallel/tp_testing.cpp, so they train with the programs'
// own setup): without ZeRO, AdamW over the rank's whole flat buffer with chapter 02's all-reduce over dp (none when dp has one
// rank); with ZeRO (the model built with zero_model_options(stage)), chapter 03's hooks and their AdamW
// over this rank's shard. Movable; the pointers stay valid. data: the group the gradients are reduced (and
// ZeRO sharded) over, spanning the grid axes data_axes — dp by default; chapter 06 passes dp × cp, whose ranks
// also hold different tokens of the same weights. Units sharded over ep (a MoE's experts, chapter 08) are
// reduced over the grid's edp instead (reduce_groups.hpp).
struct TensorParallelOptimizer {
    std::unique_ptr<AdamW> own_optim;           // without ZeRO
    std::unique_ptr<DataParallelHooks> dp_hooks;  // without ZeRO, dp > 1
    std::unique_ptr<ZeroHooks> zero;             // with ZeRO
    AdamW* optim = nullptr;                      // own_optim, or ZeRO's
    std::vector<StepHooks*> hooks;               // what the trainer runs
};
TensorParallelOptimizer make_tp_optimizer(Model& model, ParallelGrid& grid, int64_t zero, const AdamWConfig& ac,
                                          Comm* data = nullptr, Axes data_axes = kAxisDP);

}  // namespace penta
