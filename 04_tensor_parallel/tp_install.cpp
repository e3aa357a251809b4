// tp_install.cpp — tensor parallelism into a model: its options, then its seams (tp_install.hpp).
// Test: `make test CH=04`.
#include "tp_install.hpp"

namespace penta {

ModelOptions tensor_parallel_options(ModelOptions mo, const Comm& tp, bool sp) {
    return tensor_parallel_options(std::move(mo), tp.size(), tp.rank(), sp);
}

ModelOptions tensor_parallel_options(ModelOptions mo, int tp, int tp_rank, bool sp) {
    mo.tp = tp, mo.tp_rank = tp_rank;    // this rank's shard of every matrix...
    mo.sharding = &megatron_sharding();  // ...cut by the parallel layers' rules
    mo.sequence_parallel = sp;           // the norms' gradients are partial sums over tp
    return mo;
}

TensorParallelSeams install_tensor_parallel(Model& model, Comm& tp, std::unique_ptr<TensorParallel> boundary) {
    TensorParallelSeams s;
    if (tp.size() == 1 && !boundary) return s;
    s.loss = std::make_unique<VocabParallelCrossEntropy>(tp, model.layout(), model.config().vocab);
    model.set_loss(s.loss.get());
    s.boundary = boundary ? std::move(boundary) : std::make_unique<TensorParallel>(tp);
    model.set_boundary(s.boundary.get());
    return s;
}

}  // namespace penta
