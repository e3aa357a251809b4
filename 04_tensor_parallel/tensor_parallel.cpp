// tensor_parallel.cpp — f and g, the per-layer traffic meter and the TP-aware gradient norm
// (tensor_parallel.hpp).
// Test: `mpirun -np 2 build/bin/tests_04 -ts='ch04 np2'`.
#include "tensor_parallel.hpp"

#include <algorithm>

namespace penta {

void TensorParallel::tally(bool forward, double before) {
    (forward ? fwd_ : bwd_) += tp_.counters().total_bytes() - before;
}

Tensor TensorParallel::enter_forward(const Tensor& x) { return x; }  // (N, h) already on every rank

Tensor TensorParallel::enter_backward(const Tensor& dx) {
    const double before = tp_.counters().total_bytes();
    Tensor sum = dx;  // (N, h): this rank's heads' share of d x; the sum is every head's, in place
    tp_.all_reduce(sum);
    tally(false, before);
    return sum;
}

Tensor TensorParallel::exit_forward(const Tensor& y) {
    const double before = tp_.counters().total_bytes();
    Tensor sum = y;  // (N, h): a row-parallel linear's partial product; the sum is the layer's output
    tp_.all_reduce(sum);
    tally(true, before);
    return sum;
}

Tensor TensorParallel::exit_backward(const Tensor& dy) { return dy; }  // (N, h) the same on every rank

LayerTraffic::LayerTraffic(Model& model, const TensorParallel& boundary)
    : resident_(model.layout(), model.params()),
      layout_(model.layout()),
      b_(boundary),
      layers_(model.config().n_layers) {}

Tensor LayerTraffic::acquire(int unit) {
    if (unit != layout_.embedding_unit() && unit != layout_.head_unit())
        open_ = Bytes{b_.forward_bytes(), b_.backward_bytes()};
    return resident_.acquire(unit);
}

void LayerTraffic::release(int unit) {
    if (unit != layout_.embedding_unit() && unit != layout_.head_unit()) {
        Bytes& l = layers_.at(unit - 1);
        l.forward += b_.forward_bytes() - open_.forward;
        l.backward += b_.backward_bytes() - open_.backward;
    }
    resident_.release(unit);
}

std::vector<ParamRange> replicated_ranges(const ParamLayout& layout, const std::vector<ShardPiece>& pieces) {
    std::vector<ShardPiece> whole;
    if (pieces.empty()) whole.push_back(ShardPiece{0, 0, 0, layout.numel});
    std::vector<ParamRange> out;
    for (const ShardPiece& p : pieces.empty() ? whole : pieces)
        for (const ParamTensor& t : layout.tensors) {
            if (t.split != Split::replicated) continue;
            const int64_t lo = std::max(t.offset, p.full_offset);
            const int64_t hi = std::min(t.offset + t.numel(), p.full_offset + p.count);
            if (lo < hi) out.push_back(ParamRange{lo - p.full_offset + p.shard_offset, hi - lo, false});
        }
    return out;
}

void tensor_parallel_grad_norm(AdamW& optim, const ParamLayout& layout, Comm& tp,
                               const std::vector<ShardPiece>& pieces) {
    auto inner = optim.reduce_sum_squares;
    const std::vector<ParamRange> replicated = replicated_ranges(layout, pieces);
    AdamW* opt = &optim;  // its grad is read at step time: ZeRO-1 hands it a freshly reduced shard each step
    optim.reduce_sum_squares = [inner, opt, replicated, &tp](double local) {
        double r = 0;  // this rank's replicated squares: the same number on every tp rank
        for (const ParamRange& p : replicated) r += sum_squares(opt->grad.flat(p.offset, p.count));
        return inner(tp.all_reduce_scalar(local - r) + r);
    };
}

std::vector<float> gather_tensor_parallel(const LlamaConfig& cfg, const ParamLayout& shard, const Tensor& flat,
                                          Comm& tp) {
    const int t = tp.size();
    CHECK(shard.tp == t && flat.numel() == shard.numel,
          "gather_tensor_parallel: a buffer of %lld elements in a tp %d layout of %lld, over a group of %d",
          (long long)flat.numel(), shard.tp, (long long)shard.numel, t);
    Tensor all = Tensor::empty({t, shard.numel}, DType::f32, flat.device(), Tag::workspace);  // equal shards
    tp.all_gather(flat, all);
    const std::vector<float> a = all.to_host();
    const ParamLayout full = ParamLayout::build(cfg, 1, 0, shard.slice);
    std::vector<float> out(full.numel);
    for (int r = 0; r < t; r++) {
        const ParamLayout lr = ParamLayout::build(cfg, t, r, shard.slice);  // rank r's shapes and offsets
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
