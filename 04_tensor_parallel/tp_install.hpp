// tp_install.hpp — the one way tensor parallelism enters a model, in every chapter that uses it (04-09 and
// their tests): before the model is built, its layout is cut by the parallel layers' rules; after, the
// boundary (f / g) and the vocab-parallel loss are installed on it.
//
// Playbook: "Tensor parallelism". Two steps because the layout is fixed when the model is built:
//   ModelOptions mo = tensor_parallel_options(model_options(cfg), grid.tp(), cfg.sp);
//   Model model(mc, device, seed, mo);
//   TensorParallelSeams seams = install_tensor_parallel(model, grid.tp());   // chapter 05: (..., cfg.sp)
// Chapter 05 adds the overload that installs its sequence-parallel boundary instead of f / g.
//   mpirun -np 2 build/bin/04_tensor_parallel --tp 2
// Test: `make test CH=04`.
#pragma once
#include <memory>

#include "parallel_layers.hpp"
#include "tensor_parallel.hpp"
#include "vocab_parallel.hpp"

namespace penta {

// mo with this rank's shard of every matrix (MegatronSharding, tp rank tp.rank() of tp.size()); sp: the
// layout of sequence parallelism (the norms' gradients are partial sums over tp, chapter 05)
ModelOptions tensor_parallel_options(ModelOptions mo, const Comm& tp, bool sp = false);
// the same for tp rank `tp_rank` of `tp` without its group (a layout measured on one process)
ModelOptions tensor_parallel_options(ModelOptions mo, int tp, int tp_rank, bool sp = false);

// The tensor-parallel seams of a model on the tp group, installed on it: the boundary (f / g, TensorParallel,
// unless one is given: chapter 05's SequenceParallel) and the vocab-parallel loss. Without a boundary given,
// nothing when the group has one rank; a boundary given is installed whatever the group's size (chapter
// 04's program meters f / g at --tp 1 too). The model holds pointers to them: keep this alive as long as
// the model runs. Installing again replaces both (chapter 05's program measures f / g, then SP's pair).
struct TensorParallelSeams {
    std::unique_ptr<TensorParallel> boundary;
    std::unique_ptr<VocabParallelCrossEntropy> loss;
};
TensorParallelSeams install_tensor_parallel(Model& model, Comm& tp, std::unique_ptr<TensorParallel> boundary = nullptr);

}  // namespace penta
