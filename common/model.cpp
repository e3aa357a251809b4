// model.cpp — the Llama decoder's forward and backward, written by hand (model.hpp).
//
// Read block_forward, block_backward_input and block_backward_weight side by side: every saved tensor of
// LayerActs is written in the first and read in one of the others, and the tensor-parallel boundaries
// (tp_->enter_* / exit_*), the attention and MLP cores, the parameter provider and the gradient sink are
// the only places where a parallel layout changes anything. Construction and the walk over the units are
// in model_units.cpp.
// Playbook: "First steps: training on one GPU" (activation recomputation: Recompute::selective drops the
// attention probabilities, Recompute::full keeps only the block inputs and reruns each block's forward
// inside backward, Recompute::offload parks each block's activations on the host, offload.hpp), "Pipeline parallelism" (backward as B + W). Test: `make test CH=01`.
#include "model.hpp"

#include <optional>

#include "ops.hpp"
#include "linear_gemm.hpp"

namespace penta {

namespace {

Tensor make(const Shape& shape, DType dtype, Device dev, Tag tag) { return Tensor::empty(shape, dtype, dev, tag); }

}  // namespace

void Model::norm_weight_grad(const ParamTensor& t, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& rstd) {
    Tensor no_dx, no_w;
    if (!(t.grad_summed_on & kAxisTP)) {
        rmsnorm_backward(dy, x, no_w, rstd, no_dx, dw);
        return;
    }
    // sequence parallelism: this rank normalised only its own tokens, so its gradient is a partial sum
    // over tp; sum this micro-batch's part over the group before it joins the accumulated gradient
    Tensor part = Tensor::zeros(dw.shape, dw.dtype, device_, Tag::workspace);  // (h)
    rmsnorm_backward(dy, x, no_w, rstd, no_dx, part);
    tp_->sum_token_split_grad(part);
    add_inplace(dw, part);
}

// ---- decoder block --------------------------------------------------------------------------------------

// Saved tensors are allocated with `saved` (activations, or workspace while recomputing / evaluating), the
// block output with `out_tag` (it is the next block's saved input).
Tensor Model::block_forward(const LayerParams& w, const MicroBatch& mb, double global_tokens, const Tensor& x_in,
                            LayerActs& a, Tag saved, Tag out_tag, bool keep_probs, KVCacheLayer* cache) {
    const int64_t N = x_in.size(0), h = cfg_.hidden;
    const float eps = (float)cfg_.norm_eps;
    const DType act = opt_.precision.act;
    a.x_in = x_in;  // (N, h)

    // ---- attention: x_mid = x_in + Attn(RMSNorm(x_in))
    a.attn_rstd = make({N}, DType::f32, device_, saved);  // a statistic: f32 whatever the activations are
    Tensor xn1 = make({N, h}, act, device_, saved);
    rmsnorm_forward(x_in, w["input_layernorm.weight"], xn1, a.attn_rstd, eps);
    a.xn1 = tp_->enter_forward(xn1);  // f   (Ng, h); Ng = N unless SP gathers the sequence
    Tensor y = attn_->forward(cfg_, w, mb, a.xn1, a.attn, saved, keep_probs, cache);  // (Ng, h) partial under TP
    Tensor attn = tp_->exit_forward(y);  // g   (N, h)
    a.x_mid = make({N, h}, act, device_, saved);
    add(x_in, attn, a.x_mid);

    // ---- MLP: x_out = x_mid + MLP(RMSNorm(x_mid))
    a.mlp_rstd = make({N}, DType::f32, device_, saved);
    Tensor xn2 = make({N, h}, act, device_, saved);
    rmsnorm_forward(a.x_mid, w["post_attention_layernorm.weight"], xn2, a.mlp_rstd, eps);
    a.xn2 = tp_->enter_forward(xn2);  // f   (Ng, h)
    Tensor y2;
    a.mlp = mlp_->forward(cfg_, w, mb, global_tokens, a.xn2, y2, saved);
    Tensor mlp = tp_->exit_forward(y2);  // g   (N, h)
    Tensor x_out = make({N, h}, act, device_, out_tag);
    add(a.x_mid, mlp, x_out);
    return x_out;
}

// B: d loss / d x_out -> d loss / d x_in. Leaves in `a` what the weight gradients need.
Tensor Model::block_backward_input(const LayerParams& w, const MicroBatch& mb, LayerActs& a, const Tensor& dx_out,
                                   Tag keep) {
    Tensor no_dw;
    // ---- MLP
    Tensor dy2 = tp_->exit_backward(dx_out);  // g^T (Ng, h)
    Tensor dxn2 = mlp_->backward_input(w, *a.mlp, dy2, keep);
    a.d_xn2 = tp_->enter_backward(dxn2);  // f^T (N, h)
    Tensor dx_mid = make(a.x_mid.shape, a.x_mid.dtype, device_, keep);  // attention's W reads it (as d_y)
    rmsnorm_backward(a.d_xn2, a.x_mid, w["post_attention_layernorm.weight"], a.mlp_rstd, dx_mid, no_dw);
    add_inplace(dx_mid, dx_out);  // the residual path

    // ---- attention
    Tensor dy1 = tp_->exit_backward(dx_mid);  // g^T (Ng, h)
    Tensor dxn1 = attn_->backward_input(cfg_, w, mb, a.attn, dy1, keep);
    a.d_xn1 = tp_->enter_backward(dxn1);  // f^T (N, h)
    Tensor dx_in = make(a.x_in.shape, a.x_in.dtype, device_, keep);  // the layer below's MLP W reads it
    rmsnorm_backward(a.d_xn1, a.x_in, w["input_layernorm.weight"], a.attn_rstd, dx_in, no_dw);
    add_inplace(dx_in, dx_mid);
    return dx_in;
}

// W: the layer's weight gradients from what the forward kept and B left; reads no weight.
void Model::block_backward_weight(int64_t layer, LayerActs& a) {
    LayerParams g = layer_grads(layer);
    const int unit = layout_.layer_unit(layer);
    auto norm = [&](const char* role) -> const ParamTensor& {
        return layout_.tensors[layout_.find_in_unit(unit, role)];
    };
    mlp_->backward_weight(g, a.xn2, *a.mlp);
    norm_weight_grad(norm("post_attention_layernorm.weight"), g["post_attention_layernorm.weight"], a.d_xn2, a.x_mid,
                     a.mlp_rstd);
    attn_->backward_weight(g, a.xn1, a.attn);
    norm_weight_grad(norm("input_layernorm.weight"), g["input_layernorm.weight"], a.d_xn1, a.x_in, a.attn_rstd);
    a = LayerActs{};  // this layer's activations are consumed: free them now, not at the end
}

// ---- embedding and head ---------------------------------------------------------------------------------

Tensor Model::embed_forward(const Tensor& tokens, Tag tag) {
    const int unit = layout_.embedding_unit();
    notify(unit, Pass::forward, true);
    Tensor p = acquire(unit, Pass::forward);
    Tensor x = make({tokens.numel(), cfg_.hidden}, opt_.precision.act, device_, tag);  // (N, h)
    embedding_forward(tokens, tensor_in(p, unit, "model.embed_tokens.weight"), x, layout_.vocab_start);
    release(unit, tied_pass(embedding_chunk_));  // a tied head reads the table again at the end of the pass
    Tensor out = tp_->exit_forward(x);  // vocab-parallel: each rank holds the rows of its own tokens only
    notify(unit, Pass::forward, false);
    return out;
}

double Model::head_forward(Run run, HeadActs& acts, const Tensor& x, const Tensor& targets, double global_tokens,
                           Tensor* logits_out) {
    const int unit = layout_.head_unit(), emb_unit = layout_.embedding_unit();
    const int64_t N = x.size(0);
    const Tag keep = run == Run::train ? Tag::activations : Tag::workspace;
    notify(unit, Pass::forward, true);
    Tensor p = acquire(unit, Pass::forward);
    // a tied head reads the embedding unit's table (the one the embedding's forward kept, released with again,
    // or a pipeline stage's replica)
    const bool tied = cfg_.tied_embeddings;
    Tensor emb = tied ? acquire(emb_unit, -1) : Tensor();
    acts.x = x;  // (N, h)
    acts.rstd = make({N}, DType::f32, device_, keep);
    Tensor xn = make({N, cfg_.hidden}, opt_.precision.act, device_, keep);
    rmsnorm_forward(x, tensor_in(p, unit, "model.norm.weight"), xn, acts.rstd, (float)cfg_.norm_eps);
    acts.xn = tp_->enter_forward(xn);  // f   (Ng, h)
    Tensor W = lm_head_weight(p, emb);
    Tensor logits = make({acts.xn.size(0), W.size(0)}, opt_.precision.act, device_, keep);  // (Ng, V / tp)
    linear_forward(acts.xn, W, logits);
    if (tied) release(emb_unit);
    release(unit);
    double loss = 0;
    if (run == Run::logits) {
        *logits_out = logits;
    } else {
        Tensor dlogits = run == Run::train ? logits : Tensor();  // overwrites the logits with their gradient
        const double sum = loss_->forward_backward(logits, targets, dlogits, (float)(1.0 / global_tokens));
        acts.dlogits = dlogits;
        loss = sum / global_tokens;
    }
    notify(unit, Pass::forward, false);
    return loss;
}

Tensor Model::head_backward_input(HeadActs& acts, Tag keep) {
    const int unit = layout_.head_unit(), emb_unit = layout_.embedding_unit();
    Tensor p = acquire(unit, Pass::backward_input);
    Tensor emb = cfg_.tied_embeddings ? acquire(emb_unit, Pass::backward_input) : Tensor();
    Tensor W = lm_head_weight(p, emb), no_dw;
    Tensor dxn = make(acts.xn.shape, acts.xn.dtype, device_, keep);  // becomes d_xn, the final norm's W reads it
    linear_backward(acts.dlogits, acts.xn, W, dxn, no_dw);
    acts.d_xn = tp_->enter_backward(dxn);  // f^T (N, h)
    Tensor dx = make(acts.x.shape, acts.x.dtype, device_, keep);  // the last layer's MLP W reads it
    rmsnorm_backward(acts.d_xn, acts.x, tensor_in(p, unit, "model.norm.weight"), acts.rstd, dx, no_dw);
    if (cfg_.tied_embeddings) release(emb_unit);
    release(unit);
    return dx;
}

void Model::head_backward_weight(HeadActs& acts) {
    const int unit = layout_.head_unit(), emb_unit = layout_.embedding_unit();
    Tensor g = sink_->grads(unit);
    Tensor g_emb = cfg_.tied_embeddings ? sink_->grads(emb_unit) : Tensor();
    Tensor gW = lm_head_weight(g, g_emb), no_dx;
    linear_backward(acts.dlogits, acts.xn, Tensor(), no_dx, gW);
    const ParamTensor& norm = layout_.tensors[layout_.find_in_unit(unit, "model.norm.weight")];
    norm_weight_grad(norm, tensor_in(g, unit, "model.norm.weight"), acts.d_xn, acts.x, acts.rstd);
    acts = HeadActs{};
    sink_->layer_grads_ready(unit);
    // a tied table's gradient is final for this pass after the embedding's backward when the pass runs it;
    // when it does not (a stage's replica, or the embedding in another chunk), now
    if (cfg_.tied_embeddings && !tied_pass(head_chunk_)) sink_->layer_grads_ready(emb_unit);
}

// ---- the micro-batch ----------------------------------------------------------------------------------

MicroBatchActs Model::run_forward(Run run, const MicroBatch& mb, double global_tokens, const Tensor& hidden_in,
                                  Tensor* logits, int chunk, KVCache* cache) {
    const Tf32Scope tf32(opt_.precision.tf32);  // the policy's matmul precision for this pass
    const GemmScope gemm(opt_.precision.gemm);  // and the linear layers' GEMM format (chapter 11)
    CHECK(chunk >= 0 && chunk < layout_.slice.chunks(), "model chunk %d: this stage holds %d", chunk,
          layout_.slice.chunks());
    const LayerRange range = layout_.slice.chunk(chunk);
    const bool embeds = chunk == embedding_chunk_, heads = chunk == head_chunk_;
    const int64_t B = mb.B, T = mb.T, N = B * T;
    CHECK(B > 0 && T > 0, "micro-batch B %lld x T %lld must be positive", (long long)B, (long long)T);
    CHECK(T <= cfg_.max_seq, "sequence length %lld exceeds max_seq %lld of model %s", (long long)T,
          (long long)cfg_.max_seq, cfg_.name.c_str());
    CHECK(cfg_.sliding_window == 0 || T <= cfg_.sliding_window, "sequence length %lld exceeds the sliding_window %lld "
          "of model %s, past which our attention (every earlier token) is not its", (long long)T,
          (long long)cfg_.sliding_window, cfg_.name.c_str());
    CHECK(mb.positions.defined() && mb.positions.dtype == DType::i32 && mb.positions.numel() == T &&
              mb.positions.device() == device_,
          "the micro-batch needs the positions of its %lld tokens per sequence, i32 on the model's device",
          (long long)T);
    if (embeds)
        CHECK(mb.tokens.defined() && mb.tokens.dtype == DType::i32 && mb.tokens.numel() == N &&
                  mb.tokens.device() == device_,
              "tokens must be %lld i32 ids on the model's device", (long long)N);
    else
        CHECK(hidden_in.defined() && hidden_in.numel() == stage_rows(mb) * cfg_.hidden,
              "a stage without the embedding needs hidden_in of (%lld, %lld)", (long long)stage_rows(mb),
              (long long)cfg_.hidden);
    if (heads && run != Run::logits) {
        CHECK(mb.targets.defined() && mb.targets.dtype == DType::i32 && mb.targets.numel() == N &&
                  mb.targets.device() == device_,
              "targets must be %lld i32 ids on the model's device", (long long)N);
        CHECK(global_tokens > 0, "global token count %g must be positive", global_tokens);
    }

    CHECK(params_.defined() || params_src_ != default_params_.get(),
          "model built with resident_params = false needs a ParamProvider (set_param_provider)");
    CHECK(run != Run::train || grads_.defined() || sink_ != default_sink_.get(),
          "model built with resident_grads = false needs a GradientSink (set_gradient_sink) to train");
    const bool train = run == Run::train;
    const Tag keep = train ? Tag::activations : Tag::workspace;
    // full recomputation keeps only block inputs: the rest of the block is transient
    const Tag saved = train && opt_.recompute != Recompute::full ? Tag::activations : Tag::workspace;
    const bool offload = train && opt_.recompute == Recompute::offload;
    const bool keep_probs = saved == Tag::activations &&
                            (opt_.recompute == Recompute::none || offload) && attn_->materialises_probs();
    MicroBatchActs acts;
    acts.mb = mb;
    acts.chunk = chunk;
    acts.global_tokens = global_tokens;
    if (mb.tokens.defined()) acts.mb.tokens = mb.tokens.view({N});
    if (mb.targets.defined()) acts.mb.targets = mb.targets.view({N});
    Tensor x = embeds ? embed_forward(acts.mb.tokens, keep) : hidden_in.view({stage_rows(mb), cfg_.hidden});  // (N, h)
    for (int64_t i = range.begin; i < range.end; i++) {
        const int unit = layout_.layer_unit(i);
        notify(unit, Pass::forward, true);
        LayerParams w = layer_params(i, Pass::forward);
        LayerActs a;
        Tensor x_out;
        {
            // offload: record what this block's forward keeps; its input (the previous block's output, or
            // the embedding's) is this layer's x_in and goes with it; its output stays for the next block
            std::optional<ActivationCapture> capture;
            if (offload) capture.emplace(a.offloaded);
            x_out = block_forward(w, acts.mb, global_tokens, x, a, saved, keep, keep_probs,
                                  cache ? &cache->layers[i] : nullptr);
        }
        if (offload) {
            std::vector<std::weak_ptr<Buffer>> move;
            for (auto& b : a.offloaded)
                if (b.lock() != x_out.buf) move.push_back(b);
            // x_in: the embedding's output or the previous block's, never a stage's receive buffer
            if ((embeds || i > range.begin) && x.buf->tag == Tag::activations) move.push_back(x.buf);
            a.offloaded = std::move(move);
            offload_to_host(a.offloaded, offload_);
        }
        release_layer(i);
        acts.aux_loss += a.mlp->aux_loss;
        if (train) {
            if (opt_.recompute == Recompute::full) {  // keep the block input, drop the rest
                a = LayerActs();
                a.x_in = x;
            }
            acts.layers.push_back(std::move(a));
        }
        x = x_out;
        notify(unit, Pass::forward, false);
    }
    if (heads)
        acts.loss = head_forward(run, acts.head, x, acts.mb.targets, global_tokens, logits);
    else
        acts.output = x;
    return acts;
}

// The backward walk, head to embedding: at each unit the input gradient (B) when `input`, then the weight
// gradient (W) and the gradient sink's signal when `weight`. Both: the fused backward.
Tensor Model::run_backward(MicroBatchActs& acts, const Tensor& doutput, bool input, bool weight) {
    const Tf32Scope tf32(opt_.precision.tf32);
    const GemmScope gemm(opt_.precision.gemm);
    const LayerRange range = layout_.slice.chunk(acts.chunk);
    const bool embeds = acts.chunk == embedding_chunk_, heads = acts.chunk == head_chunk_;
    const MicroBatch& mb = acts.mb;
    // What B leaves for W (the gradients the weight gradients read, a recomputed block) lives until W: a
    // transient when W follows at once, but held like activations when a schedule defers W, so the memory
    // table shows what deferring costs.
    const Tag keep = weight ? Tag::workspace : Tag::activations;
    CHECK(input != acts.inputs_done, "backward_%s on a micro-batch whose input gradients are %s",
          input ? "input" : "weight", input ? "already done" : "not done yet");
    Tensor dx;
    if (input) {
        CHECK(heads || doutput.defined(), "a stage without the head needs d loss / d output in backward");
        dx = heads ? Tensor() : doutput.view({stage_rows(mb), cfg_.hidden});  // (N, h)
    }
    if (heads) {
        const int unit = layout_.head_unit();
        if (input) {
            notify(unit, Pass::backward_input, true);
            dx = head_backward_input(acts.head, keep);
            notify(unit, Pass::backward_input, false);
        }
        if (weight) {
            notify(unit, Pass::backward_weight, true);
            head_backward_weight(acts.head);
            notify(unit, Pass::backward_weight, false);
        }
    }
    for (int64_t i = range.end - 1; i >= range.begin; i--) {
        const int unit = layout_.layer_unit(i);
        LayerActs& a = acts.layers[i - range.begin];
        if (input) {
            notify(unit, Pass::backward_input, true);
            LayerParams w = layer_params(i, Pass::backward_input);
            restore_to_device(a.offloaded, device_, offload_);  // offload: this layer's activations come back
            if (opt_.recompute == Recompute::full) {
                // rerun this block's forward exactly as Recompute::none would, into transient tensors
                LayerActs r;
                block_forward(w, mb, acts.global_tokens, a.x_in, r, keep, keep, attn_->materialises_probs());
                a = std::move(r);
            }
            dx = block_backward_input(w, mb, a, dx, keep);
            release_layer(i);
            notify(unit, Pass::backward_input, false);
        }
        if (weight) {
            notify(unit, Pass::backward_weight, true);
            block_backward_weight(i, a);
            grads_ready(i);
            notify(unit, Pass::backward_weight, false);
        }
    }
    if (embeds) {
        const int unit = layout_.embedding_unit();
        if (input) {
            notify(unit, Pass::backward_input, true);
            acts.d_embed = tp_->exit_backward(dx);  // (N, h) SP: the whole sequence's rows, gathered
            notify(unit, Pass::backward_input, false);
        }
        if (weight) {
            notify(unit, Pass::backward_weight, true);
            Tensor g = tensor_in(sink_->grads(unit), unit, "model.embed_tokens.weight");
            embedding_backward(mb.tokens, acts.d_embed, g, layout_.vocab_start);
            acts.d_embed = Tensor();
            sink_->layer_grads_ready(unit);
            notify(unit, Pass::backward_weight, false);
        }
    }
    acts.inputs_done = input && !weight;
    return embeds ? Tensor() : dx;
}

MicroBatchActs Model::forward(const MicroBatch& mb, double global_tokens, const Tensor& hidden_in, int chunk) {
    return run_forward(Run::train, mb, global_tokens, hidden_in, nullptr, chunk);
}

Tensor Model::backward_input(MicroBatchActs& acts, const Tensor& doutput) {
    return run_backward(acts, doutput, true, false);
}

void Model::backward_weight(MicroBatchActs& acts) { run_backward(acts, Tensor(), false, true); }

Tensor Model::backward(MicroBatchActs& acts, const Tensor& doutput) { return run_backward(acts, doutput, true, true); }

MicroBatchActs Model::forward(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T, double global_tokens) {
    return forward(MicroBatch::whole(tokens, targets, B, T), global_tokens);
}

double Model::forward_backward(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T,
                               double global_tokens) {
    MicroBatchActs acts = forward(tokens, targets, B, T, global_tokens);
    backward(acts);
    return acts.loss;
}

double Model::forward_loss(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T,
                           double global_tokens) {
    return run_forward(Run::loss, MicroBatch::whole(tokens, targets, B, T), global_tokens, Tensor(), nullptr).loss;
}

Tensor Model::forward_logits(const Tensor& tokens, int64_t B, int64_t T, const Tensor& hidden_in) {
    Tensor logits;
    MicroBatchActs a = run_forward(Run::logits, MicroBatch::whole(tokens, Tensor(), B, T), 1.0, hidden_in, &logits);
    return layout_.slice.has_head ? logits : a.output;
}

Tensor Model::decode(const Tensor& tokens, KVCache& cache) {
    const PipelineSlice& s = layout_.slice;
    CHECK(s.has_embedding && s.has_head && s.layer_begin == 0 && s.layer_end == cfg_.n_layers,
          "generation runs the whole model on each rank, not a pipeline stage (export with --export-hf and "
          "generate from chapter 01)");
    CHECK(!tp_->splits_tokens(), "generation feeds one token at a time, which sequence parallelism cannot split "
          "over tp (generate without --sp)");
    CHECK((int64_t)cache.layers.size() == cfg_.n_layers, "decode: a KV cache of %zu layers for %lld",
          cache.layers.size(), (long long)cfg_.n_layers);
    const int64_t n = tokens.numel(), past = cache.len();
    CHECK(n >= 1 && past + n <= std::min(cache.capacity, cfg_.max_seq),
          "decode: positions %lld ... %lld are beyond the KV cache's %lld or the model's max_seq %lld",
          (long long)past, (long long)(past + n - 1), (long long)cache.capacity, (long long)cfg_.max_seq);
    CHECK(cfg_.sliding_window == 0 || past + n <= cfg_.sliding_window, "decode: %lld tokens exceed the sliding_window "
          "%lld of model %s, past which our attention (every earlier token) is not its", (long long)(past + n),
          (long long)cfg_.sliding_window, cfg_.name.c_str());
    MicroBatch mb = MicroBatch::whole(tokens, Tensor(), 1, n);
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; i++) pos[i] = (int32_t)(past + i);
    mb.positions = Tensor::from_host_i32(pos, {n}, device_, Tag::workspace);  // (n) where the new tokens sit
    Tensor logits;
    run_forward(Run::logits, mb, 1.0, Tensor(), &logits, 0, &cache);
    return logits;
}

}  // namespace penta
