// model.hpp — the Llama decoder, written once, with hand-written forward and backward (DESIGN §4).
//
//   x = embed(tokens)                                            (vocab-parallel under TP)
//   per layer:  x_mid = x + Attn(RMSNorm(x)) Wo^T                 (RoPE, causal GQA attention)
//               x_out = x_mid + (silu(xn Wg^T) * xn Wu^T) Wd^T    (xn = RMSNorm(x_mid), SwiGLU)
//   logits = RMSNorm(x) lm_head^T  (embedding^T when tied);  loss = sum CE / global token count
//
// Everything the forward keeps for backward lives in an explicit per-micro-batch struct (MicroBatchActs,
// LayerActs, HeadActs), allocated with Tag::activations; transients use Tag::workspace. So the
// allocator's activations tag measures exactly what is saved, and formulas.hpp predicts it byte-exactly.
// Parameters and gradients are two flat buffers laid out by model_layout.hpp; gradients ACCUMULATE, so
// gradient accumulation is "forward_backward per micro-batch, optimizer once".
// Parallelism plugs in through spine.hpp; the defaults make this the single-device model.
//
// Playbook: "First steps: training on one GPU" (memory, activation recomputation, gradient accumulation).
// Test: `build/bin/tests_01 -ts='ch01 np1'` (tests/01_single_gpu/test_model.cpp).
#pragma once
#include <memory>
#include <vector>

#include "model_config.hpp"
#include "model_layout.hpp"
#include "spine.hpp"

namespace penta {

struct ModelOptions {
    Recompute recompute = Recompute::none;
    AttentionKernel attention = AttentionKernel::flash;
    int tp = 1, tp_rank = 0;
    PipelineSlice slice;
    // false: no full flat parameter / gradient buffer on this rank (params() / grads() stay undefined);
    // a ParamProvider / GradientSink must then serve them: ZeRO-3's gathered units, ZeRO-2's shard (ch03)
    bool resident_params = true, resident_grads = true;
};

// What one decoder layer keeps for backward (N = B T tokens; widths local to a TP rank). With
// Recompute::full only x_in is kept and the backward refills the rest by rerunning the block.
struct LayerActs {
    Tensor x_in;       // (N, h) block input, read by the attention RMSNorm backward
    Tensor attn_rstd;  // (N) 1 / rms of x_in
    Tensor xn1;        // (N, h) normalised input of the q/k/v projections
    Tensor q;          // (N, nh hd) after RoPE
    Tensor k, v;       // (N, nkv hd), k after RoPE
    Tensor probs;      // (B, nh, T, T) only with Recompute::none and a kernel that materialises them
    Tensor attn_out;   // (N, nh hd) input of o_proj
    Tensor lse;        // (B, nh, T) log-sum-exp of the scores: rebuilds the probabilities in backward
    Tensor x_mid;      // (N, h) residual after attention
    Tensor mlp_rstd;   // (N)
    Tensor xn2;        // (N, h) normalised input of the MLP
    MlpActs mlp;       // gate, up, act: (N, f) each
};

struct HeadActs {
    Tensor x;        // (N, h) last layer's output
    Tensor rstd;     // (N)
    Tensor xn;       // (N, h) input of lm_head
    Tensor dlogits;  // (N, V) d loss / d logits, computed by the fused cross-entropy during forward
};

struct MicroBatchActs {
    int64_t B = 0, T = 0;
    Tensor tokens;  // (B T) i32, the caller's: read by the embedding backward, keep them until then
    std::vector<LayerActs> layers;  // this stage's layers, in order
    HeadActs head;
    Tensor output;    // (N, h) stage output when the stage has no head (pipeline)
    double loss = 0;  // sum of this micro-batch's token losses / global token count
};

class Model {
   public:
    Model(const LlamaConfig& cfg, Device device, uint64_t seed, const ModelOptions& opt = {});
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    const LlamaConfig& config() const { return cfg_; }
    const ModelOptions& options() const { return opt_; }
    const ParamLayout& layout() const { return layout_; }
    // name, unit, offset, shape, decay of every tensor: for the optimizer and checkpoints
    const std::vector<ParamTensor>& tensors() const { return layout_.tensors; }
    Device device() const { return device_; }
    uint64_t seed() const { return seed_; }  // what init_params was (or a shard's owner must be) keyed by
    int64_t n_params() const { return layout_.numel; }  // held here (a TP/PP shard holds a part)
    Tensor& params() { return params_; }
    Tensor& grads() { return grads_; }
    void zero_grads();

    // tokens, targets: (B T) i32 on the model's device; targets of -1 are ignored. global_tokens is the
    // number of non-ignored targets in the GLOBAL batch (all micro-batches, all DP ranks): the loss and
    // its gradient are divided by it, never by a local count (DESIGN §5).
    // A pipeline stage without the embedding reads hidden_in (N, h) instead of tokens; one without the
    // head returns its output in MicroBatchActs::output and takes d loss / d output in backward.
    MicroBatchActs forward(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T,
                           double global_tokens, const Tensor& hidden_in = {});
    // Accumulates parameter gradients and frees the activations layer by layer. Returns d loss /
    // d hidden_in for a stage without the embedding, an undefined tensor otherwise.
    Tensor backward(MicroBatchActs& acts, const Tensor& doutput = {});
    double forward_backward(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T,
                            double global_tokens);  // returns this micro-batch's loss sum / global_tokens
    // evaluation: nothing saved, no gradients
    double forward_loss(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T,
                        double global_tokens);
    Tensor forward_logits(const Tensor& tokens, int64_t B, int64_t T);  // (B T, V)

    // Swap in a chapter's implementation of a seam (spine.hpp); nullptr restores the single-device
    // default. The model does not own what it is given.
    void set_boundary(TensorParallelBoundary* b) { tp_ = b ? b : default_tp_.get(); }
    void set_attention(AttentionCore* a) { attn_ = a ? a : default_attn_.get(); }
    void set_mlp(MlpCore* m) { mlp_ = m ? m : default_mlp_.get(); }
    void set_param_provider(ParamProvider* p) { params_src_ = p ? p : default_params_.get(); }
    void set_gradient_sink(GradientSink* s) { sink_ = s ? s : default_sink_.get(); }
    void set_loss(LossCore* l) { loss_ = l ? l : default_loss_.get(); }

   private:
    enum class Pass { train, loss, logits };
    MicroBatchActs run_forward(Pass pass, const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T,
                               double global_tokens, const Tensor& hidden_in, Tensor* logits);
    Tensor embed_forward(const Tensor& tokens, Tag tag);
    void embed_backward(const Tensor& tokens, const Tensor& dx);
    Tensor block_forward(const LayerWeights& w, const Tensor& x_in, LayerActs& a, int64_t B, Tag saved,
                         Tag out_tag, bool keep_probs);
    Tensor block_backward(const LayerWeights& w, LayerWeights& g, const LayerActs& a, int64_t B,
                          const Tensor& dx_out);
    double head_forward(Pass pass, HeadActs& acts, const Tensor& x, const Tensor& targets,
                        double global_tokens, Tensor* logits);
    Tensor head_backward(HeadActs& acts);
    Tensor tensor_view(const Tensor& unit_flat, int tensor) const;  // one tensor of a unit's flat view
    LayerWeights layer_view(const Tensor& unit_flat, int unit) const;
    Tensor lm_head_weight(const Tensor& head_flat, const Tensor& embedding_flat) const;

    LlamaConfig cfg_;
    ModelOptions opt_;
    Device device_;
    uint64_t seed_;
    ParamLayout layout_;
    Tensor params_, grads_;  // (n_params) flat, Tag::params / Tag::grads

    std::unique_ptr<TensorParallelBoundary> default_tp_;
    std::unique_ptr<AttentionCore> default_attn_;
    std::unique_ptr<MlpCore> default_mlp_;
    std::unique_ptr<ParamProvider> default_params_;
    std::unique_ptr<GradientSink> default_sink_;
    std::unique_ptr<LossCore> default_loss_;
    TensorParallelBoundary* tp_;
    AttentionCore* attn_;
    MlpCore* mlp_;
    ParamProvider* params_src_;
    GradientSink* sink_;
    LossCore* loss_;
};

}  // namespace penta
