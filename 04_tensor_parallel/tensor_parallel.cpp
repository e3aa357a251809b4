// tensor_parallel.cpp — f and g, the per-layer traffic meter and the gather of tp shards
// (tensor_parallel.hpp).
// Test: `mpirun -np 2 build/bin/tests_04 -ts='ch04 np2'`.
#include "tensor_parallel.hpp"

#include <algorithm>

#include "parallel_layers.hpp"

namespace penta {

void TensorParallel::tally(bool forward, double before) {
    (forward ? fwd_ : bwd_) += tp_.counters().total_bytes() - before;
}

Tensor TensorParallel::f(const Tensor& x) { return x; }  // (N, h) already on every rank

Tensor TensorParallel::f_backward(const Tensor& dx) {
    // EXERCISE 04.1 begin: f's backward: the column-parallel input's gradient is summed over the tp ranks
    const double before = tp_.counters().total_bytes();
    Tensor sum = dx;  // (N, h): this rank's heads' share of d x; the sum is every head's, in place
    tp_.all_reduce(sum);
    tally(false, before);
    return sum;
    // EXERCISE 04.1 end
}

Tensor TensorParallel::g(const Tensor& y) {
    // EXERCISE 04.1 begin: g's forward: the row-parallel partial products are summed over the tp ranks
    const double before = tp_.counters().total_bytes();
    Tensor sum = y;  // (N, h): a row-parallel linear's partial product; the sum is the layer's output
    tp_.all_reduce(sum);
    tally(true, before);
    return sum;
    // EXERCISE 04.1 end
}

Tensor TensorParallel::g_backward(const Tensor& dy) { return dy; }  // (N, h) the same on every rank

LayerTraffic::LayerTraffic(const Model& model, const TensorParallel& boundary)
    : layout_(model.layout()), b_(boundary), layers_(model.config().n_layers) {}

void LayerTraffic::unit_begin(int unit, Pass) {
    if (layout_.units[unit].layer >= 0) open_ = Bytes{b_.forward_bytes(), b_.backward_bytes()};
}

void LayerTraffic::unit_end(int unit, Pass) {
    const int64_t layer = layout_.units[unit].layer;
    if (layer < 0) return;
    Bytes& l = layers_.at(layer);
    l.forward += b_.forward_bytes() - open_.forward;
    l.backward += b_.backward_bytes() - open_.backward;
}

std::vector<float> gather_tensor_parallel(const LlamaConfig& cfg, const ParamLayout& shard, const Tensor& flat,
                                          Comm& tp) {
    const int t = tp.size();
    CHECK(shard.tp == t && flat.numel() == shard.numel,
          "gather_tensor_parallel: a buffer of %lld elements in a tp %d layout of %lld, over a group of %d",
          (long long)flat.numel(), shard.tp, (long long)shard.numel, t);
    Tensor all = Tensor::empty({t, shard.numel}, flat.dtype, flat.device(), Tag::workspace);  // equal shards
    tp.all_gather(flat, all);
    const std::vector<float> a = all.to_host();
    const ParamLayout full = ParamLayout::build(cfg, 1, 0, shard.slice);
    std::vector<float> out(full.numel);
    for (int r = 0; r < t; r++) {
        const ParamLayout lr = tensor_parallel_layout(cfg, t, r, shard.slice);  // rank r's shapes and offsets
        for (size_t i = 0; i < lr.tensors.size(); i++) {
            const ParamTensor &s = lr.tensors[i], &f = full.tensors[i];
            if (s.split == Split::replicated && r > 0) continue;
            const int64_t cols = s.shape.size() == 2 ? s.shape[1] : s.shape[0];
            const int64_t full_cols = f.shape.size() == 2 ? f.shape[1] : f.shape[0];
            const int64_t rows = s.shape.size() == 2 ? std::min(s.shape[0], f.shape[0] - s.row0) : 1;
            for (int64_t i0 = 0; i0 < rows; i0++)  // rows past the real vocabulary are padding
                std::copy_n(a.begin() + r * shard.numel + s.offset + i0 * cols, cols,
                            out.begin() + f.offset + (s.row0 + i0) * full_cols + s.col0);
        }
    }
    return out;
}

}  // namespace penta
