// parallel_layers.cpp — the split rules of the three parallel layers and the plan that applies them
// (parallel_layers.hpp).
// Test: `mpirun -np 2 build/bin/tests_04 -ts='ch04 np2'`.
#include "parallel_layers.hpp"

namespace penta {

TensorShard ColumnParallelLinear::shard(const std::string& name, const Shape& full, int tp, int rank) {
    CHECK(full[0] % tp == 0, "tensor %s: tp %d must divide its %lld rows", name.c_str(), tp, (long long)full[0]);
    TensorShard s{full};
    s.shape[0] = full[0] / tp;  // (out/t, in): this rank's output features
    s.row0 = rank * s.shape[0];
    return s;
}

TensorShard RowParallelLinear::shard(const std::string& name, const Shape& full, int tp, int rank) {
    CHECK(full[1] % tp == 0, "tensor %s: tp %d must divide its %lld columns", name.c_str(), tp, (long long)full[1]);
    TensorShard s{full};
    s.shape[1] = full[1] / tp;  // (out, in/t): this rank's input features
    s.col0 = rank * s.shape[1];
    return s;
}

TensorShard VocabParallelEmbedding::shard(const std::string&, const Shape& full, int tp, int rank) {
    TensorShard s{full};
    s.shape[0] = (full[0] + tp - 1) / tp;  // (Vp/t, h): any vocabulary, padded up to a multiple of t
    s.row0 = rank * s.shape[0];
    return s;
}

TensorShard MegatronSharding::shard(const std::string& name, Split split, const Shape& full, int tp, int rank) const {
    switch (split) {
        case Split::column: return ColumnParallelLinear::shard(name, full, tp, rank);
        case Split::row: return RowParallelLinear::shard(name, full, tp, rank);
        case Split::vocab: return VocabParallelEmbedding::shard(name, full, tp, rank);
        case Split::replicated: break;
    }
    return TensorShard{full};  // the norms (and a MoE router): whole on every rank
}

const ShardingPlan& megatron_sharding() {
    static const MegatronSharding plan;
    return plan;
}

ParamLayout tensor_parallel_layout(const LlamaConfig& cfg, int tp, int rank, PipelineSlice slice) {
    return ParamLayout::build(cfg, tp, rank, slice, &megatron_sharding());
}

}  // namespace penta
