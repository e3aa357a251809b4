// tensor_parallel.hpp — Megatron-LM tensor parallelism: the f / g operators at the boundaries of the
// column- and row-parallel linears, the per-layer traffic they cause, and the gather of a tp-sharded flat
// buffer back into the unsharded model's.
//
// Playbook: "Tensor parallelism" — "Tensor Parallelism in a Transformer Block". A column-parallel linear
// (q/k/v, gate/up: each rank holds rows of W, i.e. output columns of y) needs the whole input on every
// rank; a row-parallel linear (o_proj, down_proj: columns of W) takes that split input and produces a
// partial sum. Between them the heads / the SwiGLU columns are entirely local. Two operators close the
// region:
//              forward                         backward
//   f (enter)  identity: x is replicated        all-reduce: each rank's heads gave part of dx   (TensorParallel::f)
//   g (exit)   all-reduce: sum the partial y    identity: dy is replicated                     (TensorParallel::g)
// f and g are conjugate: each one's backward is the other's forward. Per layer and micro-batch that is
// one all-reduce of (s b, h) per region and direction: 2 forward + 2 backward, each 2(t-1)/t · s b h
// elements on the ring, 8(t-1)/t · s b h in all (formulas.hpp: tp_layer_comm_elements).
// Which part of each matrix a rank holds is the parallel layers' split rules (parallel_layers.hpp); the
// model calls f and g at the right places (common/model.cpp); this file implements them; tp_install.hpp
// puts both into a model. The global gradient norm needs nothing from this chapter: the layout says which
// tensors tp cuts, so every rank counts its shards and tp rank 0 the replicated norms (model_layout.hpp).
// See README.md.
//   mpirun -np 2 build/bin/04_tensor_parallel --tp 2
// Test: `make test CH=04`.
#pragma once
#include <vector>

#include "../common/comm.hpp"
#include "../common/model.hpp"

namespace penta {

// f and g over the tp group, with their byte tallies: the model's TensorParallelBoundary (spine.hpp), whose
// enter / exit are f / g. Chapter 05's SequenceParallel overrides f and g with their sequence-split forms.
class TensorParallel : public TensorParallelBoundary {
   public:
    explicit TensorParallel(Comm& tp) : tp_(tp) {}
    // f: enters a column-parallel region (before q/k/v, gate/up and lm_head; parallel_layers.hpp)
    virtual Tensor f(const Tensor& x);            // forward:  identity, x (N, h) is on every rank
    virtual Tensor f_backward(const Tensor& dx);  // backward: all-reduce of dx (N, h) over tp
    // g: leaves a row-parallel region (after o_proj, down_proj and the vocab-parallel embedding)
    virtual Tensor g(const Tensor& y);            // forward:  all-reduce of the partial y (N, h) over tp
    virtual Tensor g_backward(const Tensor& dy);  // backward: identity, dy (N, h) is on every rank
    // the seam the model calls (common/model.cpp): enter is f, exit is g
    Tensor enter_forward(const Tensor& x) final { return f(x); }
    Tensor enter_backward(const Tensor& dx) final { return f_backward(dx); }
    Tensor exit_forward(const Tensor& y) final { return g(y); }
    Tensor exit_backward(const Tensor& dy) final { return g_backward(dy); }
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

// The boundary's bytes split by decoder layer: an observer of the model (spine.hpp) that opens a window when
// a layer's pass begins and closes it when it ends, whoever provides the weights (resident, ZeRO-3).
// Embedding, head and loss traffic fall outside; so do the gradient sums of sequence parallelism's norms
// (they are not activations).
class LayerTraffic : public ModelObserver {
   public:
    LayerTraffic(const Model& model, const TensorParallel& boundary);
    void unit_begin(int unit, Pass pass) override;
    void unit_end(int unit, Pass pass) override;
    struct Bytes {
        double forward = 0, backward = 0;
    };
    const std::vector<Bytes>& layers() const { return layers_; }  // per decoder layer, since reset()
    void reset() { layers_.assign(layers_.size(), Bytes{}); }

   private:
    const ParamLayout& layout_;
    const TensorParallel& b_;
    std::vector<Bytes> layers_;
    Bytes open_;  // the boundary's tallies when the open window began
};

// Every tp rank's shard of a flat buffer (parameters or gradients in this rank's layout `shard`) put back
// together as the flat buffer of the unsharded model (ParamLayout::build(cfg) for the same pipeline
// slice), on every rank, on the host: each tensor's shard sits at its row0 / col0 of full_shape, vocab
// padding dropped, replicated tensors taken from tp rank 0. For tests and checkpoints.
std::vector<float> gather_tensor_parallel(const LlamaConfig& cfg, const ParamLayout& shard, const Tensor& flat,
                                          Comm& tp);

}  // namespace penta
