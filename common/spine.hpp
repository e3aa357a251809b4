// spine.hpp — the seams through which parallelism enters the one decoder of model.cpp (DESIGN §4).
//
// The block is written once; each later chapter swaps in its own implementation of one of these:
//   TensorParallelBoundary  Megatron's f and g around column/row-parallel linears (ch04), SP's
//                           all-gather / reduce-scatter along the sequence (ch05)
//   AttentionCore           local causal attention here; ring / all-gather attention for CP (ch06)
//   MlpCore                 dense SwiGLU here; MoE with expert-parallel all-to-all (ch08)
//   ParamProvider           the resident flat buffer here; ZeRO-3's all-gather + prefetch (ch03)
//   GradientSink            nothing here; DP's bucketed all-reduce / ZeRO's reduce-scatter (ch02, ch03)
//   LossCore                local fused cross-entropy here; vocab-parallel cross-entropy (ch04)
// The single-device defaults below do no communication, so the model on one device is the same code
// that runs inside every parallel layout.
// Playbook: "Tensor parallelism", "Sequence parallelism", "Context parallelism", "ZeRO", "Data
// parallelism", "Expert parallelism". Test: `build/bin/tests_01 -ts='ch01 np1'`.
#pragma once
#include <map>

#include "model_config.hpp"
#include "model_layout.hpp"
#include "tensor.hpp"

namespace penta {

// Views of one decoder layer's parameters (or of their gradients) in the flat buffer. Local shapes:
// wq (nh hd, h), wk/wv (nkv hd, h), wo (h, nh hd), gate/up (f, h), down (h, f) with nh, nkv, f per tp rank.
struct LayerWeights {
    Tensor attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
};

// What the dense MLP saves for backward; each (N, f).
struct MlpActs {
    Tensor gate, up, act;
};

// f before a column-parallel region and g after a row-parallel one (Megatron-LM):
//              forward                  backward
//   enter (f)  identity  | SP gather    all-reduce | SP reduce-scatter
//   exit  (g)  all-reduce| SP r-scatter identity   | SP all-gather
struct TensorParallelBoundary {
    virtual ~TensorParallelBoundary() = default;
    virtual Tensor enter_forward(const Tensor& x) = 0;
    virtual Tensor enter_backward(const Tensor& dx) = 0;
    virtual Tensor exit_forward(const Tensor& y_partial) = 0;
    virtual Tensor exit_backward(const Tensor& dy) = 0;
};

// Causal GQA attention on this rank's q (B, T, nh, hd), k, v (B, T, nkv, hd) -> out (B, T, nh, hd) and
// lse (B, nh, T). probs (B, nh, T, T) is non-null only when the model keeps the probabilities for backward.
struct AttentionCore {
    virtual ~AttentionCore() = default;
    // global positions (T) i32 of this rank's T tokens per sequence, for RoPE (CP shards the sequence)
    virtual Tensor positions(int64_t T, Device device) = 0;
    // true when forward materialises the (T, T) probabilities, so keeping them saves recomputation
    virtual bool materialises_probs() const = 0;
    virtual void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                         Tensor* probs) = 0;
    // dq, dk, dv are ACCUMULATED (pass zeros); probs as saved by forward, or nullptr to recompute
    virtual void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor* probs, Tensor& dq, Tensor& dk,
                          Tensor& dv) = 0;
};

// The MLP of a block between its enter and exit boundaries: x (N, h) normalised -> y (N, h), a partial
// sum under TP. forward allocates what it saves in `acts` with `tag` (activations, or workspace when the
// block is being recomputed). backward overwrites dx (N, h) and accumulates weight grads into g.
struct MlpCore {
    virtual ~MlpCore() = default;
    virtual void forward(const LayerWeights& w, const Tensor& x, MlpActs& acts, Tensor& y, Tag tag) = 0;
    virtual void backward(const LayerWeights& w, LayerWeights& g, const Tensor& x, const MlpActs& acts,
                          const Tensor& dy, Tensor& dx) = 0;
};

// A unit's parameters as one flat view, valid between acquire and release.
struct ParamProvider {
    virtual ~ParamProvider() = default;
    virtual Tensor acquire(int unit) = 0;
    virtual void release(int unit) = 0;
};

// Where backward accumulates a unit's gradients, and the signal that they are final for this
// micro-batch (the point where DP starts communicating while backward goes on).
struct GradientSink {
    virtual ~GradientSink() = default;
    virtual Tensor grads(int unit) = 0;
    virtual void layer_grads_ready(int unit) = 0;
};

// logits (N, V) and targets (N) -> the SUM of the token losses; dlogits (may alias logits) receives
// (softmax - onehot) * grad_scale when defined. Targets of -1 are ignored.
struct LossCore {
    virtual ~LossCore() = default;
    virtual double forward_backward(const Tensor& logits, const Tensor& targets, Tensor& dlogits,
                                    float grad_scale) = 0;
};

// The backward of a linear whose input x also feeds other linears (q/k/v, gate/up):
// dx += dy W (accumulated, unlike linear_backward's overwrite) and dW += dy^T x.
void linear_backward_add(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor& dx, Tensor& dW);

// ---- single-device defaults ---------------------------------------------------------------------------

struct IdentityBoundary : TensorParallelBoundary {
    Tensor enter_forward(const Tensor& x) override { return x; }
    Tensor enter_backward(const Tensor& dx) override { return dx; }
    Tensor exit_forward(const Tensor& y_partial) override { return y_partial; }
    Tensor exit_backward(const Tensor& dy) override { return dy; }
};

// The whole sequence is local: positions 0..T-1, the naive or the flash kernel of ops.hpp.
class LocalAttention : public AttentionCore {
   public:
    explicit LocalAttention(AttentionKernel kernel) : kernel_(kernel) {}
    Tensor positions(int64_t T, Device device) override;
    bool materialises_probs() const override { return kernel_ == AttentionKernel::naive; }
    void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                 Tensor* probs) override;
    void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor* probs, Tensor& dq, Tensor& dk, Tensor& dv) override;

   private:
    AttentionKernel kernel_;
    std::map<std::pair<int64_t, Device>, Tensor> positions_;  // (T) arange per length and device
};

// act = silu(x W_gate^T) * (x W_up^T); y = act W_down^T
struct DenseSwiGLU : MlpCore {
    void forward(const LayerWeights& w, const Tensor& x, MlpActs& acts, Tensor& y, Tag tag) override;
    void backward(const LayerWeights& w, LayerWeights& g, const Tensor& x, const MlpActs& acts,
                  const Tensor& dy, Tensor& dx) override;
};

// Parameters resident in the flat buffer: acquire is a view, release nothing. Holds a reference to the
// owner's buffer, so a buffer the owner replaces (a loaded checkpoint) is what acquire sees.
class ResidentParams : public ParamProvider {
   public:
    ResidentParams(const ParamLayout& layout, const Tensor& params) : layout_(layout), params_(params) {}
    Tensor acquire(int unit) override;
    void release(int) override {}

   private:
    const ParamLayout& layout_;
    const Tensor& params_;
};

// Gradients accumulate in the resident flat buffer and nobody needs to hear when they are ready.
class ResidentGrads : public GradientSink {
   public:
    ResidentGrads(const ParamLayout& layout, const Tensor& grads) : layout_(layout), grads_(grads) {}
    Tensor grads(int unit) override;
    void layer_grads_ready(int) override {}

   private:
    const ParamLayout& layout_;
    const Tensor& grads_;
};

struct LocalCrossEntropy : LossCore {
    double forward_backward(const Tensor& logits, const Tensor& targets, Tensor& dlogits,
                            float grad_scale) override;
};

}  // namespace penta
