// spine.cpp — the single-device implementations of the model's seams (spine.hpp): the attention sublayer
// with the local kernel, the dense SwiGLU MLP, resident parameters and gradients, the local fused
// cross-entropy. Read forward, backward_input and backward_weight of each core side by side: every tensor
// the forward keeps is read by one of the two backward halves, and the weight gradients (W) read no
// weight, only what the forward kept and what the input-gradient pass (B) left.
// Playbook: "First steps: training on one GPU", "Pipeline parallelism" (zero bubble: B and W).
// Test: `make test CH=01`.
#include "spine.hpp"

#include <cmath>
#include <numeric>

#include "ops.hpp"
#include "linear_gemm.hpp"

namespace penta {

namespace {

// (N, n hd) -> (B, T, n, hd): the head layout attention and RoPE work on
Tensor heads(const Tensor& x, int64_t B, int64_t hd) { return x.view({B, x.size(0) / B, x.size(1) / hd, hd}); }

Tensor like(const Tensor& x, const Shape& shape, Tag tag) { return Tensor::empty(shape, x.dtype, x.device(), tag); }

}  // namespace

MicroBatch MicroBatch::whole(Tensor tokens, Tensor targets, int64_t B, int64_t T, int64_t index) {
    MicroBatch mb;
    mb.index = index, mb.B = B, mb.T = T;
    std::vector<int32_t> pos(T);
    std::iota(pos.begin(), pos.end(), 0);
    const Device dev = tokens.defined() ? tokens.device() : Device::cpu;
    mb.positions = Tensor::from_host_i32(pos, {T}, dev, Tag::workspace);  // (T)
    mb.tokens = std::move(tokens);
    mb.targets = std::move(targets);
    return mb;
}

Tensor LayerParams::find(const std::string& role) const {
    for (const auto& [unit, flat] : units_) {
        const int t = layout_->find_in_unit(unit, role);
        if (t < 0) continue;
        const ParamTensor& p = layout_->tensors[t];
        return flat.flat(p.offset - layout_->units[unit].offset, p.numel()).view(p.shape);
    }
    return Tensor();
}

Tensor LayerParams::operator[](const std::string& role) const {
    Tensor t = find(role);
    CHECK(t.defined(), "layer %lld has no parameter tensor '%s'", (long long)layer_, role.c_str());
    return t;
}

const char* pass_name(Pass p) {
    switch (p) {
        case Pass::forward: return "forward";
        case Pass::backward_input: return "backward (input)";
        case Pass::backward_weight: return "backward (weights)";
    }
    return "?";
}

void linear_backward_input_add(const Tensor& dy, const Tensor& W, Tensor& dx) {
    linear_gemm(dy, W, dx, false, false, 1.0f, Operand::gradient, Operand::weight);  // (N, out) @ (out, in) += (N, in)
}

// ---- the attention sublayer ------------------------------------------------------------------------------

void AttentionCore::declare(LayoutBuilder& b) const {
    const LlamaConfig& c = b.config();
    const int64_t h = c.hidden, hd = c.head_dim(), q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
    const float std = 0.02f, std_out = 0.02f / std::sqrt(2.0f * (float)c.n_layers);  // o_proj writes the residual
    b.add("self_attn.q_proj.weight", {q_dim, h}, Split::column, std);
    b.add("self_attn.k_proj.weight", {kv_dim, h}, Split::column, std);
    b.add("self_attn.v_proj.weight", {kv_dim, h}, Split::column, std);
    b.add("self_attn.o_proj.weight", {h, q_dim}, Split::row, std_out);
}

Tensor AttentionCore::forward(const LlamaConfig& c, const LayerParams& w, const MicroBatch& mb, const Tensor& x,
                              AttnActs& a, Tag saved, bool keep_probs, KVCacheLayer* cache) {
    const Tensor wq = w["self_attn.q_proj.weight"], wk = w["self_attn.k_proj.weight"];
    const Tensor wv = w["self_attn.v_proj.weight"], wo = w["self_attn.o_proj.weight"];
    const int64_t Ng = x.size(0), B = mb.B, T = Ng / B, hd = c.head_dim(), q_dim = wq.size(0), kv_dim = wk.size(0);
    CHECK(inv_freq_.defined(), "the attention core has no RoPE table (the model sets it when built)");
    a.q = like(x, {Ng, q_dim}, saved);
    a.k = like(x, {Ng, kv_dim}, saved);
    a.v = like(x, {Ng, kv_dim}, saved);
    linear_forward(x, wq, a.q);  // column-parallel: this rank's heads
    linear_forward(x, wk, a.k);
    linear_forward(x, wv, a.v);
    Tensor q4 = heads(a.q, B, hd), k4 = heads(a.k, B, hd), v4 = heads(a.v, B, hd);  // (B, T, n, hd)
    rope_forward(q4, mb.positions, inv_freq_, q4);  // each token rotated by its own position
    rope_forward(k4, mb.positions, inv_freq_, k4);
    a.out = like(x, {Ng, q_dim}, saved);
    a.lse = Tensor::empty({B, q_dim / hd, T}, DType::f32, x.device(), saved);  // an f32 statistic
    if (keep_probs) a.probs = like(x, {B, q_dim / hd, T, T}, saved);
    Tensor o4 = heads(a.out, B, hd);
    if (cache) {  // generation: append this step's keys and values, attend to all the cached ones
        const int64_t past = cache->len, len = past + T;
        CHECK(B == 1 && len <= cache->k.size(0), "KV cache: %lld + %lld tokens of one sequence exceed its %lld",
              (long long)past, (long long)T, (long long)cache->k.size(0));
        Tensor k_new = cache->k.slice(past, T), v_new = cache->v.slice(past, T);  // (T, nkv hd)
        copy(k_new, a.k);
        copy(v_new, a.v);
        cache->len = len;
        const Tensor K = heads(cache->k.slice(0, len), 1, hd), V = heads(cache->v.slice(0, len), 1, hd);
        attention_forward_tiled(q4, K, V, o4, a.lse, AttnSpan{past, 0, true});  // query i sits at past + i
    } else {
        attend(q4, k4, v4, mb.positions, o4, a.lse, keep_probs ? &a.probs : nullptr);
    }
    Tensor y = like(x, {Ng, wo.size(0)}, Tag::workspace);
    linear_forward(a.out, wo, y);  // row-parallel: a partial sum under TP
    return y;
}

Tensor AttentionCore::backward_input(const LlamaConfig& c, const LayerParams& w, const MicroBatch& mb, AttnActs& a,
                                     const Tensor& dy, Tag keep) {
    const int64_t B = mb.B, hd = c.head_dim();
    const Tensor wq = w["self_attn.q_proj.weight"], wk = w["self_attn.k_proj.weight"];
    const Tensor wv = w["self_attn.v_proj.weight"], wo = w["self_attn.o_proj.weight"];
    a.d_y = dy;  // (Ng, h) o_proj's weight gradient reads it in W
    Tensor dattn = like(a.out, a.out.shape, Tag::workspace), none;
    linear_backward(dy, a.out, wo, dattn, none);  // the input half: dattn = dy Wo
    Tensor dq = Tensor::zeros(a.q.shape, a.q.dtype, a.q.device(), Tag::workspace);  // attend_backward accumulates
    Tensor dk = Tensor::zeros(a.k.shape, a.k.dtype, a.k.device(), Tag::workspace);
    a.d_v = Tensor::zeros(a.v.shape, a.v.dtype, a.v.device(), keep);
    Tensor dq4 = heads(dq, B, hd), dk4 = heads(dk, B, hd), dv4 = heads(a.d_v, B, hd);
    attend_backward(heads(dattn, B, hd), heads(a.q, B, hd), heads(a.k, B, hd), heads(a.v, B, hd), mb.positions,
                    heads(a.out, B, hd), a.lse, a.probs.defined() ? &a.probs : nullptr, dq4, dk4, dv4);
    a.d_q = like(a.q, a.q.shape, keep);
    a.d_k = like(a.k, a.k.shape, keep);
    Tensor dq_pre4 = heads(a.d_q, B, hd), dk_pre4 = heads(a.d_k, B, hd);
    rope_backward(dq4, mb.positions, inv_freq_, dq_pre4);
    rope_backward(dk4, mb.positions, inv_freq_, dk_pre4);
    Tensor dx = like(a.q, {a.q.size(0), wq.size(1)}, keep);  // (Ng, h) the norm's W reads it (after f^T)
    linear_backward(a.d_q, Tensor(), wq, dx, none);
    linear_backward_input_add(a.d_k, wk, dx);  // x feeds q, k and v
    linear_backward_input_add(a.d_v, wv, dx);
    a.q = a.k = a.v = a.probs = a.lse = Tensor();  // W needs none of these: free them before it runs
    return dx;
}

void AttentionCore::backward_weight(LayerParams& g, const Tensor& x, AttnActs& a) {
    Tensor no_dx, gq = g["self_attn.q_proj.weight"], gk = g["self_attn.k_proj.weight"];
    Tensor gv = g["self_attn.v_proj.weight"], go = g["self_attn.o_proj.weight"];
    linear_backward(a.d_y, a.out, Tensor(), no_dx, go);
    linear_backward(a.d_q, x, Tensor(), no_dx, gq);
    linear_backward(a.d_k, x, Tensor(), no_dx, gk);
    linear_backward(a.d_v, x, Tensor(), no_dx, gv);
    a = AttnActs{};  // consumed
}

void LocalAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& out,
                            Tensor& lse, Tensor* probs) {
    // the whole sequence is here, so query i and key j sit at positions i and j: the kernels' own
    // causal mask is the model's (positions 0..T-1, MicroBatch::whole)
    if (kernel_ == AttentionKernel::naive)
        attention_forward_naive(q, k, v, out, lse, probs);
    else
        attention_forward_tiled(q, k, v, out, lse);
}

void LocalAttention::attend_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& positions, const Tensor& out, const Tensor& lse, const Tensor* probs,
                                     Tensor& dq, Tensor& dk, Tensor& dv) {
    if (kernel_ == AttentionKernel::naive)
        attention_backward_naive(dout, q, k, v, out, lse, probs, dq, dk, dv);
    else
        attention_backward_tiled(dout, q, k, v, out, lse, dq, dk, dv);
}

// ---- the dense SwiGLU MLP --------------------------------------------------------------------------------

void DenseSwiGLU::declare(LayoutBuilder& b) const {
    const LlamaConfig& c = b.config();
    const float std = 0.02f, std_out = 0.02f / std::sqrt(2.0f * (float)c.n_layers);  // down_proj writes the residual
    const int64_t f = width_ > 0 ? width_ : c.ffn;
    b.add(prefix_ + names_.gate, {f, c.hidden}, Split::column, std);
    b.add(prefix_ + names_.up, {f, c.hidden}, Split::column, std);
    b.add(prefix_ + names_.down, {c.hidden, f}, Split::row, std_out);
}

std::unique_ptr<MlpActs> DenseSwiGLU::forward(const LlamaConfig&, const LayerParams& w, const MicroBatch&, double,
                                              const Tensor& x, Tensor& y, Tag saved) {
    const Tensor w_gate = w[prefix_ + names_.gate], w_up = w[prefix_ + names_.up];
    const Tensor w_down = w[prefix_ + names_.down];
    const int64_t N = x.size(0), f = w_gate.size(0);
    auto a = std::make_unique<Acts>();
    a->gate = like(x, {N, f}, saved);  // (N, f)
    a->up = like(x, {N, f}, saved);    // (N, f)
    a->act = like(x, {N, f}, saved);   // (N, f)
    linear_forward(x, w_gate, a->gate);
    linear_forward(x, w_up, a->up);
    swiglu_forward(a->gate, a->up, a->act);
    y = like(x, {N, w_down.size(0)}, Tag::workspace);  // (N, h)
    linear_forward(a->act, w_down, y);
    return a;
}

Tensor DenseSwiGLU::backward_input(const LayerParams& w, MlpActs& acts, const Tensor& dy, Tag keep) {
    Acts& a = static_cast<Acts&>(acts);
    const Tensor w_gate = w[prefix_ + names_.gate], w_up = w[prefix_ + names_.up];
    const Tensor w_down = w[prefix_ + names_.down];
    Tensor none;
    a.d_y = dy;
    Tensor dact = like(a.act, a.act.shape, Tag::workspace);  // (N, f)
    linear_backward(dy, a.act, w_down, dact, none);
    a.d_gate = like(a.gate, a.gate.shape, keep);  // (N, f)
    a.d_up = like(a.up, a.up.shape, keep);        // (N, f)
    swiglu_backward(dact, a.gate, a.up, a.d_gate, a.d_up);
    Tensor dx = like(dy, {dy.size(0), w_gate.size(1)}, keep);  // (N, h) the norm's W reads it (after f^T)
    linear_backward(a.d_gate, Tensor(), w_gate, dx, none);
    linear_backward_input_add(a.d_up, w_up, dx);  // x feeds up too
    a.gate = a.up = Tensor();  // W reads act and the gradients, not these
    return dx;
}

void DenseSwiGLU::backward_weight(LayerParams& g, const Tensor& x, MlpActs& acts) {
    Acts& a = static_cast<Acts&>(acts);
    Tensor no_dx, gg = g[prefix_ + names_.gate], gu = g[prefix_ + names_.up];
    Tensor gd = g[prefix_ + names_.down];
    linear_backward(a.d_y, a.act, Tensor(), no_dx, gd);
    linear_backward(a.d_gate, x, Tensor(), no_dx, gg);
    linear_backward(a.d_up, x, Tensor(), no_dx, gu);
    a = Acts{};  // consumed
}

// ---- resident parameters and gradients, the local loss -------------------------------------------------------

Tensor ResidentParams::acquire(int unit, int) {
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
