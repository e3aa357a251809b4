// spine.cpp — the single-device implementations of the model's seams (spine.hpp): local attention, the
// dense SwiGLU MLP, resident parameters and gradients, the local fused cross-entropy.
// Playbook: "First steps: training on one GPU". Test: `build/bin/tests_01 -ts='ch01 np1'`.
#include "spine.hpp"

#include <numeric>

#include "ops.hpp"

namespace penta {

void linear_backward_add(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor& dx, Tensor& dW) {
    Tensor skip_dx;
    linear_backward(dy, x, W, skip_dx, dW);
    matmul(dy, W, dx, false, false, 1.0f, 1.0f);  // (N, out) @ (out, in)
}

Tensor LocalAttention::positions(int64_t T, Device device) {
    Tensor& pos = positions_[{T, device}];
    if (!pos.defined()) {
        std::vector<int32_t> ids(T);
        std::iota(ids.begin(), ids.end(), 0);
        pos = Tensor::from_host_i32(ids, {T}, device, Tag::workspace);  // (T)
    }
    return pos;
}

void LocalAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                             Tensor* probs) {
    if (kernel_ == AttentionKernel::naive)
        attention_forward_naive(q, k, v, out, lse, probs);
    else
        attention_forward_tiled(q, k, v, out, lse);
}

void LocalAttention::backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor* probs, Tensor& dq,
                              Tensor& dk, Tensor& dv) {
    if (kernel_ == AttentionKernel::naive)
        attention_backward_naive(dout, q, k, v, out, lse, probs, dq, dk, dv);
    else
        attention_backward_tiled(dout, q, k, v, out, lse, dq, dk, dv);
}

void DenseSwiGLU::forward(const LayerWeights& w, const Tensor& x, MlpActs& acts, Tensor& y, Tag tag) {
    const int64_t N = x.size(0), f = w.w_gate.size(0);
    const Device dev = x.device();
    acts.gate = Tensor::empty({N, f}, DType::f32, dev, tag);  // (N, f)
    acts.up = Tensor::empty({N, f}, DType::f32, dev, tag);    // (N, f)
    acts.act = Tensor::empty({N, f}, DType::f32, dev, tag);   // (N, f)
    linear_forward(x, w.w_gate, acts.gate);
    linear_forward(x, w.w_up, acts.up);
    swiglu_forward(acts.gate, acts.up, acts.act);
    linear_forward(acts.act, w.w_down, y);  // (N, h)
}

void DenseSwiGLU::backward(const LayerWeights& w, LayerWeights& g, const Tensor& x, const MlpActs& acts,
                           const Tensor& dy, Tensor& dx) {
    const Device dev = x.device();
    Tensor dact = Tensor::empty(acts.act.shape, DType::f32, dev, Tag::workspace);  // (N, f)
    linear_backward(dy, acts.act, w.w_down, dact, g.w_down);
    Tensor dgate = Tensor::empty(acts.gate.shape, DType::f32, dev, Tag::workspace);  // (N, f)
    Tensor dup = Tensor::empty(acts.up.shape, DType::f32, dev, Tag::workspace);      // (N, f)
    swiglu_backward(dact, acts.gate, acts.up, dgate, dup);
    linear_backward(dgate, x, w.w_gate, dx, g.w_gate);
    linear_backward_add(dup, x, w.w_up, dx, g.w_up);  // x feeds up too
}

Tensor ResidentParams::acquire(int unit) {
    const ParamUnit& u = layout_.units.at(unit);
    return params_.flat(u.offset, u.numel);
}

Tensor ResidentGrads::grads(int unit) {
    const ParamUnit& u = layout_.units.at(unit);
    return grads_.flat(u.offset, u.numel);
}

double LocalCrossEntropy::forward_backward(const Tensor& logits, const Tensor& targets, Tensor& dlogits,
                                           float grad_scale) {
    Tensor no_losses;
    return cross_entropy_forward_backward(logits, targets, dlogits, grad_scale, -1, no_losses);
}

}  // namespace penta
