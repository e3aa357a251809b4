// tensor_parallel.hpp — Megatron-LM tensor parallelism: the f / g operators at the boundaries of the
// column- and row-parallel linears, the per-layer traffic they cause, and the global gradient norm of a
// model whose matrices are sharded while its norm weights are replicated.
//
// Playbook: "Tensor parallelism" — "Tensor Parallelism in a Transformer Block". A column-parallel linear
// (q/k/v, gate/up: each rank holds rows of W, i.e. output columns of y) needs the whole input on every
// rank; a row-parallel linear (o_proj, down_proj: columns of W) takes that split input and produces a
// partial sum. Between them the heads / the SwiGLU columns are entirely local. Two operators close the
// region:
//              forward                         backward
//   f (enter)  identity: x is replicated        all-reduce: each rank's heads gave part of dx
//   g (exit)   all-reduce: sum the partial y    identity: dy is replicated
// f and g are conjugate: each one's backward is the other's forward. Per layer and micro-batch that is
// one all-reduce of (s b, h) per region and direction: 2 forward + 2 backward, each 2(t-1)/t · s b h
// elements on the ring, 8(t-1)/t · s b h in all (formulas.hpp: tp_layer_comm_elements).
// The sharding itself lives in the parameter layout (common/model_layout.cpp, ParamLayout::build); the
// model calls f and g at the right places (common/model.cpp); this file implements them. See README.md.
//   mpirun -np 2 build/bin/04_tensor_parallel --tp 2
// Test: `make test CH=04`.
#pragma once
#include <vector>

#include "../common/comm.hpp"
#include "../common/model.hpp"
#include "../common/optim.hpp"
#include "../03_zero/zero_shard.hpp"

namespace penta {

class TensorParallel : public TensorParallelBoundary {
   public:
    explicit TensorParallel(Comm& tp) : tp_(tp) {}
    Tensor enter_forward(const Tensor& x) override;    // f:   identity
    Tensor enter_backward(const Tensor& dx) override;  // f^T: all-reduce over tp
    Tensor exit_forward(const Tensor& y) override;     // g:   all-reduce over tp
    Tensor exit_backward(const Tensor& dy) override;   // g^T: identity
    Comm& group() const { return tp_; }
    // bytes this boundary's collectives sent (ring accounting, Comm::counters) in forward calls and in
    // backward calls since construction; a recomputed forward inside backward counts as forward
    double forward_bytes() const { return fwd_; }
    double backward_bytes() const { return bwd_; }

   protected:
    // adds what the group's byte counter grew by since `before` to the forward or backward tally
    void tally(bool forward, double before);
    Comm& tp_;
    double fwd_ = 0, bwd_ = 0;
};

// The boundary's bytes split by decoder layer: installed as the model's ParamProvider (over the resident
// parameters), it opens a window at acquire(layer) and closes it at release(layer), which bracket exactly
// that layer's forward or backward (model.cpp). Embedding, head and loss traffic fall outside.
class LayerTraffic : public ParamProvider {
   public:
    LayerTraffic(Model& model, const TensorParallel& boundary);
    Tensor acquire(int unit) override;
    void release(int unit) override;
    struct Bytes {
        double forward = 0, backward = 0;
    };
    const std::vector<Bytes>& layers() const { return layers_; }  // per decoder layer, since reset()
    void reset() { layers_.assign(layers_.size(), Bytes{}); }

   private:
    ResidentParams resident_;
    const ParamLayout& layout_;
    const TensorParallel& b_;
    std::vector<Bytes> layers_;
    Bytes open_;  // the boundary's tallies at the open window's acquire
};

// The replicated tensors' elements (the norm weights) inside an optimizer's buffer, as ranges of that
// buffer. pieces: where the buffer comes from in the model's flat buffer (ZeRO's shard, UnitShards);
// empty: the buffer is the whole flat buffer.
std::vector<ParamRange> replicated_ranges(const ParamLayout& layout, const std::vector<ShardPiece>& pieces = {});

// Makes optim's global gradient norm count every parameter exactly once under TP: the squares of the
// sharded tensors are summed over the tp group, the replicated ones (norm weights, identical on every tp
// rank) are taken from this rank only. Wraps whatever optim.reduce_sum_squares already does (ZeRO's sum
// over dp), so call it after the data-parallel / ZeRO setup. pieces: as for replicated_ranges.
void tensor_parallel_grad_norm(AdamW& optim, const ParamLayout& layout, Comm& tp,
                               const std::vector<ShardPiece>& pieces = {});

// Every tp rank's shard of a flat buffer (parameters or gradients in this rank's layout `shard`) put back
// together as the flat buffer of the unsharded model (ParamLayout::build(cfg) for the same pipeline
// slice), on every rank, on the host: each tensor's shard sits at its row0 / col0 of full_shape, vocab
// padding dropped, replicated tensors taken from tp rank 0. For tests and checkpoints.
std::vector<float> gather_tensor_parallel(const LlamaConfig& cfg, const ParamLayout& shard, const Tensor& flat,
                                          Comm& tp);

}  // namespace penta
