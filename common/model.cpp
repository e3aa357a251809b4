// model.cpp — the Llama decoder's forward and backward, written by hand (model.hpp).
//
// Read block_forward and block_backward side by side: every saved tensor of LayerActs is written in the
// first and read in the second, and the tensor-parallel boundaries (tp_->enter_* / exit_*), the attention
// core, the MLP core, the parameter provider and the gradient sink are the only places where a parallel
// layout changes anything.
// Playbook: "First steps: training on one GPU" (activation recomputation: Recompute::selective drops the
// attention probabilities, Recompute::full keeps only the block inputs and reruns each block's forward
// inside backward). Test: `build/bin/tests_01 -ts='ch01 np1'`.
#include "model.hpp"

#include "ops.hpp"

namespace penta {

namespace {

Tensor make(const Shape& shape, Device dev, Tag tag) { return Tensor::empty(shape, DType::f32, dev, tag); }

// (N, n hd) -> (B, T, n, hd): the head layout attention and RoPE work on
Tensor heads(const Tensor& x, int64_t B, int64_t hd) {
    return x.view({B, x.size(0) / B, x.size(1) / hd, hd});
}

}  // namespace

Model::Model(const LlamaConfig& cfg, Device device, uint64_t seed, const ModelOptions& opt)
    : cfg_(cfg),
      opt_(opt),
      device_(device),
      seed_(seed),
      layout_(ParamLayout::build(cfg, opt.tp, opt.tp_rank, opt.slice)) {
    if (opt.resident_params) {
        params_ = Tensor::empty({layout_.numel}, DType::f32, device_, Tag::params);
        init_params(layout_, seed, params_);
    }
    if (opt.resident_grads) grads_ = Tensor::zeros({layout_.numel}, DType::f32, device_, Tag::grads);
    default_tp_ = std::make_unique<IdentityBoundary>();
    default_attn_ = std::make_unique<LocalAttention>(opt.attention);
    default_mlp_ = std::make_unique<DenseSwiGLU>();
    default_params_ = std::make_unique<ResidentParams>(layout_, params_);
    default_sink_ = std::make_unique<ResidentGrads>(layout_, grads_);
    default_loss_ = std::make_unique<LocalCrossEntropy>();
    tp_ = default_tp_.get();
    attn_ = default_attn_.get();
    mlp_ = default_mlp_.get();
    params_src_ = default_params_.get();
    sink_ = default_sink_.get();
    loss_ = default_loss_.get();
}

void Model::zero_grads() {
    if (grads_.defined()) fill(grads_, 0.0f);  // else the gradient sink owns (and zeroes) them
}

Tensor Model::tensor_view(const Tensor& unit_flat, int tensor) const {
    const ParamTensor& t = layout_.tensors[tensor];
    return unit_flat.flat(t.offset - layout_.units[t.unit].offset, t.numel()).view(t.shape);
}

LayerWeights Model::layer_view(const Tensor& unit_flat, int unit) const {
    const std::vector<int>& t = layout_.units[unit].tensors;  // the order of ParamLayout::build
    auto v = [&](int i) { return tensor_view(unit_flat, t[i]); };
    return LayerWeights{v(0), v(1), v(2), v(3), v(4), v(5), v(6), v(7), v(8)};
}

// untied: the head's own (V, h) matrix; tied: the embedding table
Tensor Model::lm_head_weight(const Tensor& head_flat, const Tensor& embedding_flat) const {
    const ParamUnit& head = layout_.units[layout_.head_unit()];
    return cfg_.tied_embeddings ? tensor_view(embedding_flat, layout_.units[0].tensors[0])
                                : tensor_view(head_flat, head.tensors[1]);
}

// ---- decoder block --------------------------------------------------------------------------------------

// Saved tensors are allocated with `saved` (activations, or workspace while recomputing / evaluating), the
// block output with `out_tag` (it is the next block's saved input).
Tensor Model::block_forward(const LayerWeights& w, const Tensor& x_in, LayerActs& a, int64_t B, Tag saved,
                            Tag out_tag, bool keep_probs) {
    const int64_t N = x_in.size(0), h = cfg_.hidden, hd = cfg_.head_dim();
    const int64_t q_dim = w.wq.size(0), kv_dim = w.wk.size(0);
    const float eps = (float)cfg_.norm_eps, theta = (float)cfg_.rope_theta;
    a.x_in = x_in;  // (N, h)

    // ---- attention: x_mid = x_in + Attn(RMSNorm(x_in)) Wo^T
    a.attn_rstd = make({N}, device_, saved);
    Tensor xn1 = make({N, h}, device_, saved);
    rmsnorm_forward(x_in, w.attn_norm, xn1, a.attn_rstd, eps);
    a.xn1 = tp_->enter_forward(xn1);  // f   (Ng, h); Ng = N unless SP gathers the sequence
    const int64_t Ng = a.xn1.size(0), T = Ng / B;
    a.q = make({Ng, q_dim}, device_, saved);
    a.k = make({Ng, kv_dim}, device_, saved);
    a.v = make({Ng, kv_dim}, device_, saved);
    linear_forward(a.xn1, w.wq, a.q);  // column-parallel: this rank's heads
    linear_forward(a.xn1, w.wk, a.k);
    linear_forward(a.xn1, w.wv, a.v);
    Tensor pos = attn_->positions(T, device_);  // (T) global positions for RoPE
    Tensor q4 = heads(a.q, B, hd), k4 = heads(a.k, B, hd), v4 = heads(a.v, B, hd);  // (B, T, n, hd)
    rope_forward(q4, pos, theta, q4);
    rope_forward(k4, pos, theta, k4);
    a.attn_out = make({Ng, q_dim}, device_, saved);
    a.lse = make({B, q_dim / hd, T}, device_, saved);
    if (keep_probs) a.probs = make({B, q_dim / hd, T, T}, device_, saved);
    Tensor o4 = heads(a.attn_out, B, hd);
    attn_->forward(q4, k4, v4, o4, a.lse, keep_probs ? &a.probs : nullptr);
    Tensor y = make({Ng, h}, device_, Tag::workspace);
    linear_forward(a.attn_out, w.wo, y);  // row-parallel: a partial sum under TP
    Tensor attn = tp_->exit_forward(y);   // g   (N, h)
    a.x_mid = make({N, h}, device_, saved);
    add(x_in, attn, a.x_mid);

    // ---- MLP: x_out = x_mid + MLP(RMSNorm(x_mid))
    a.mlp_rstd = make({N}, device_, saved);
    Tensor xn2 = make({N, h}, device_, saved);
    rmsnorm_forward(a.x_mid, w.mlp_norm, xn2, a.mlp_rstd, eps);
    a.xn2 = tp_->enter_forward(xn2);  // f   (Ng, h)
    Tensor y2 = make({Ng, h}, device_, Tag::workspace);
    mlp_->forward(w, a.xn2, a.mlp, y2, saved);
    Tensor mlp = tp_->exit_forward(y2);  // g   (N, h)
    Tensor x_out = make({N, h}, device_, out_tag);
    add(a.x_mid, mlp, x_out);
    return x_out;
}

// d loss / d x_out -> d loss / d x_in; parameter grads accumulate into g.
Tensor Model::block_backward(const LayerWeights& w, LayerWeights& g, const LayerActs& a, int64_t B,
                             const Tensor& dx_out) {
    const int64_t N = a.x_in.size(0), Ng = a.xn1.size(0), h = cfg_.hidden, hd = cfg_.head_dim();
    const float theta = (float)cfg_.rope_theta;
    const Tag ws = Tag::workspace;

    // ---- MLP
    Tensor dy2 = tp_->exit_backward(dx_out);  // g^T (Ng, h)
    Tensor dxn2 = make({Ng, h}, device_, ws);
    mlp_->backward(w, g, a.xn2, a.mlp, dy2, dxn2);
    Tensor dxn2_local = tp_->enter_backward(dxn2);  // f^T (N, h)
    Tensor dx_mid = make({N, h}, device_, ws);
    rmsnorm_backward(dxn2_local, a.x_mid, w.mlp_norm, a.mlp_rstd, dx_mid, g.mlp_norm);
    add_inplace(dx_mid, dx_out);  // the residual path

    // ---- attention
    Tensor dy1 = tp_->exit_backward(dx_mid);  // g^T (Ng, h)
    Tensor dattn = make(a.attn_out.shape, device_, ws);
    linear_backward(dy1, a.attn_out, w.wo, dattn, g.wo);
    Tensor dq = Tensor::zeros(a.q.shape, DType::f32, device_, ws);  // attention backward accumulates
    Tensor dk = Tensor::zeros(a.k.shape, DType::f32, device_, ws);
    Tensor dv = Tensor::zeros(a.v.shape, DType::f32, device_, ws);
    Tensor dq4 = heads(dq, B, hd), dk4 = heads(dk, B, hd), dv4 = heads(dv, B, hd);
    attn_->backward(heads(dattn, B, hd), heads(a.q, B, hd), heads(a.k, B, hd), heads(a.v, B, hd),
                    heads(a.attn_out, B, hd), a.lse, a.probs.defined() ? &a.probs : nullptr, dq4, dk4, dv4);
    Tensor pos = attn_->positions(Ng / B, device_);
    Tensor dq_pre = make(a.q.shape, device_, ws), dk_pre = make(a.k.shape, device_, ws);
    Tensor dq_pre4 = heads(dq_pre, B, hd), dk_pre4 = heads(dk_pre, B, hd);
    rope_backward(dq4, pos, theta, dq_pre4);
    rope_backward(dk4, pos, theta, dk_pre4);
    Tensor dxn1 = make({Ng, h}, device_, ws);
    linear_backward(dq_pre, a.xn1, w.wq, dxn1, g.wq);
    linear_backward_add(dk_pre, a.xn1, w.wk, dxn1, g.wk);  // xn1 feeds q, k and v
    linear_backward_add(dv, a.xn1, w.wv, dxn1, g.wv);
    Tensor dxn1_local = tp_->enter_backward(dxn1);  // f^T (N, h)
    Tensor dx_in = make({N, h}, device_, ws);
    rmsnorm_backward(dxn1_local, a.x_in, w.attn_norm, a.attn_rstd, dx_in, g.attn_norm);
    add_inplace(dx_in, dx_mid);
    return dx_in;
}

// ---- embedding and head ---------------------------------------------------------------------------------

Tensor Model::embed_forward(const Tensor& tokens, Tag tag) {
    const int unit = layout_.embedding_unit();
    Tensor p = params_src_->acquire(unit);
    Tensor x = make({tokens.numel(), cfg_.hidden}, device_, tag);  // (N, h)
    embedding_forward(tokens, tensor_view(p, layout_.units[unit].tensors[0]), x, layout_.vocab_start);
    params_src_->release(unit);
    return tp_->exit_forward(x);  // vocab-parallel: each rank holds the rows of its own tokens only
}

void Model::embed_backward(const Tensor& tokens, const Tensor& dx) {
    const int unit = layout_.embedding_unit();
    Tensor d = tp_->exit_backward(dx);
    Tensor g = tensor_view(sink_->grads(unit), layout_.units[unit].tensors[0]);
    embedding_backward(tokens, d, g, layout_.vocab_start);
    sink_->layer_grads_ready(unit);
}

double Model::head_forward(Pass pass, HeadActs& acts, const Tensor& x, const Tensor& targets,
                           double global_tokens, Tensor* logits_out) {
    const int unit = layout_.head_unit();
    const int64_t N = x.size(0);
    const Tag keep = pass == Pass::train ? Tag::activations : Tag::workspace;
    Tensor p = params_src_->acquire(unit);
    Tensor emb = cfg_.tied_embeddings ? params_src_->acquire(layout_.embedding_unit()) : Tensor();
    acts.x = x;  // (N, h)
    acts.rstd = make({N}, device_, keep);
    Tensor xn = make({N, cfg_.hidden}, device_, keep);
    rmsnorm_forward(x, tensor_view(p, layout_.units[unit].tensors[0]), xn, acts.rstd, (float)cfg_.norm_eps);
    acts.xn = tp_->enter_forward(xn);  // f   (Ng, h)
    Tensor W = lm_head_weight(p, emb);
    Tensor logits = make({acts.xn.size(0), W.size(0)}, device_, keep);  // (Ng, V / tp)
    linear_forward(acts.xn, W, logits);
    if (cfg_.tied_embeddings) params_src_->release(layout_.embedding_unit());
    params_src_->release(unit);
    if (pass == Pass::logits) {
        *logits_out = logits;
        return 0;
    }
    Tensor dlogits = pass == Pass::train ? logits : Tensor();  // overwrites the logits with their gradient
    const double sum = loss_->forward_backward(logits, targets, dlogits, (float)(1.0 / global_tokens));
    acts.dlogits = dlogits;
    return sum / global_tokens;
}

Tensor Model::head_backward(HeadActs& acts) {
    const int unit = layout_.head_unit();
    Tensor p = params_src_->acquire(unit);
    Tensor emb = cfg_.tied_embeddings ? params_src_->acquire(layout_.embedding_unit()) : Tensor();
    Tensor g = sink_->grads(unit);
    Tensor g_emb = cfg_.tied_embeddings ? sink_->grads(layout_.embedding_unit()) : Tensor();
    const int norm = layout_.units[unit].tensors[0];
    Tensor W = lm_head_weight(p, emb), gW = lm_head_weight(g, g_emb);
    Tensor dxn = make(acts.xn.shape, device_, Tag::workspace);
    linear_backward(acts.dlogits, acts.xn, W, dxn, gW);
    Tensor dxn_local = tp_->enter_backward(dxn);  // f^T (N, h)
    Tensor dx = make(acts.x.shape, device_, Tag::workspace);
    Tensor g_norm = tensor_view(g, norm);
    rmsnorm_backward(dxn_local, acts.x, tensor_view(p, norm), acts.rstd, dx, g_norm);
    if (cfg_.tied_embeddings) params_src_->release(layout_.embedding_unit());
    params_src_->release(unit);
    acts = HeadActs{};
    sink_->layer_grads_ready(unit);  // a tied embedding's grad is final only after the embedding backward
    return dx;
}

// ---- the micro-batch ----------------------------------------------------------------------------------

MicroBatchActs Model::run_forward(Pass pass, const Tensor& tokens, const Tensor& targets, int64_t B,
                                  int64_t T, double global_tokens, const Tensor& hidden_in, Tensor* logits) {
    const PipelineSlice& s = layout_.slice;
    const int64_t N = B * T;
    CHECK(B > 0 && T > 0, "micro-batch B %lld x T %lld must be positive", (long long)B, (long long)T);
    CHECK(T <= cfg_.max_seq, "sequence length %lld exceeds max_seq %lld of model %s", (long long)T,
          (long long)cfg_.max_seq, cfg_.name.c_str());
    if (s.has_embedding)
        CHECK(tokens.defined() && tokens.dtype == DType::i32 && tokens.numel() == N &&
                  tokens.device() == device_,
              "tokens must be %lld i32 ids on the model's device", (long long)N);
    else
        CHECK(hidden_in.defined() && hidden_in.numel() == N * cfg_.hidden,
              "a stage without the embedding needs hidden_in of (%lld, %lld)", (long long)N,
              (long long)cfg_.hidden);
    if (s.has_head && pass != Pass::logits) {
        CHECK(targets.defined() && targets.dtype == DType::i32 && targets.numel() == N &&
                  targets.device() == device_,
              "targets must be %lld i32 ids on the model's device", (long long)N);
        CHECK(global_tokens > 0, "global token count %g must be positive", global_tokens);
    }

    CHECK(params_.defined() || params_src_ != default_params_.get(),
          "model built with resident_params = false needs a ParamProvider (set_param_provider)");
    CHECK(pass != Pass::train || grads_.defined() || sink_ != default_sink_.get(),
          "model built with resident_grads = false needs a GradientSink (set_gradient_sink) to train");
    const bool train = pass == Pass::train;
    const Tag keep = train ? Tag::activations : Tag::workspace;
    // full recomputation keeps only block inputs: the rest of the block is transient
    const Tag saved = train && opt_.recompute != Recompute::full ? Tag::activations : Tag::workspace;
    const bool keep_probs =
        saved == Tag::activations && opt_.recompute == Recompute::none && attn_->materialises_probs();
    MicroBatchActs mb;
    mb.B = B, mb.T = T;
    mb.tokens = s.has_embedding ? tokens.view({N}) : Tensor();
    Tensor x = s.has_embedding ? embed_forward(mb.tokens, keep) : hidden_in.view({N, cfg_.hidden});  // (N, h)
    for (int64_t i = s.layer_begin; i < s.layer_end; i++) {
        const int unit = layout_.layer_unit(i);
        LayerWeights w = layer_view(params_src_->acquire(unit), unit);
        LayerActs a;
        Tensor x_out = block_forward(w, x, a, B, saved, keep, keep_probs);
        params_src_->release(unit);
        if (train) {
            if (opt_.recompute == Recompute::full) {  // keep the block input, drop the rest
                a = LayerActs();
                a.x_in = x;
            }
            mb.layers.push_back(std::move(a));
        }
        x = x_out;
    }
    if (s.has_head)
        mb.loss = head_forward(pass, mb.head, x, targets.defined() ? targets.view({N}) : targets,
                               global_tokens, logits);
    else
        mb.output = x;
    return mb;
}

MicroBatchActs Model::forward(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T,
                              double global_tokens, const Tensor& hidden_in) {
    return run_forward(Pass::train, tokens, targets, B, T, global_tokens, hidden_in, nullptr);
}

Tensor Model::backward(MicroBatchActs& mb, const Tensor& doutput) {
    const PipelineSlice& s = layout_.slice;
    CHECK(s.has_head || doutput.defined(), "a stage without the head needs d loss / d output in backward");
    Tensor dx = s.has_head ? head_backward(mb.head) : doutput.view({mb.B * mb.T, cfg_.hidden});  // (N, h)
    for (int64_t i = s.layer_end - 1; i >= s.layer_begin; i--) {
        const int unit = layout_.layer_unit(i);
        LayerActs& a = mb.layers[i - s.layer_begin];
        LayerWeights w = layer_view(params_src_->acquire(unit), unit);
        LayerWeights g = layer_view(sink_->grads(unit), unit);
        if (opt_.recompute == Recompute::full) {
            // rerun this block's forward exactly as Recompute::none would, into transient tensors
            LayerActs r;
            block_forward(w, a.x_in, r, mb.B, Tag::workspace, Tag::workspace, attn_->materialises_probs());
            dx = block_backward(w, g, r, mb.B, dx);
        } else {
            dx = block_backward(w, g, a, mb.B, dx);
        }
        a = LayerActs{};  // this layer's activations are consumed: free them now, not at the end
        params_src_->release(unit);
        sink_->layer_grads_ready(unit);
    }
    if (!s.has_embedding) return dx;
    embed_backward(mb.tokens, dx);
    return Tensor();
}

double Model::forward_backward(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T,
                               double global_tokens) {
    MicroBatchActs mb = forward(tokens, targets, B, T, global_tokens);
    backward(mb);
    return mb.loss;
}

double Model::forward_loss(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T,
                           double global_tokens) {
    return run_forward(Pass::loss, tokens, targets, B, T, global_tokens, Tensor(), nullptr).loss;
}

Tensor Model::forward_logits(const Tensor& tokens, int64_t B, int64_t T) {
    Tensor logits;
    run_forward(Pass::logits, tokens, Tensor(), B, T, 1.0, Tensor(), &logits);
    return logits;
}

}  // namespace penta
