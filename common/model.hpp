// model.hpp — the Llama decoder, written once, with hand-written forward and backward (ARCHITECTURE.md §3).
//
//   x = embed(tokens)                                            (vocab-parallel under TP)
//   per layer:  x_mid = x + Attn(RMSNorm(x))                      (q/k/v, RoPE, causal GQA attention, o)
//               x_out = x_mid + MLP(RMSNorm(x_mid))               (SwiGLU, or a MoE core)
//   logits = RMSNorm(x) lm_head^T  (embedding^T when tied);  loss = sum CE / global token count
//
// Everything the forward keeps for backward lives in an explicit per-micro-batch struct (MicroBatchActs,
// LayerActs, AttnActs, the MLP core's acts, HeadActs), allocated with Tag::activations; transients use
// Tag::workspace. So the allocator's activations tag measures exactly what is saved, and formulas.hpp
// predicts it byte-exactly. Parameters and gradients are two flat buffers laid out by model_layout.hpp;
// gradients ACCUMULATE, so gradient accumulation is "forward and backward per micro-batch, optimizer once".
//
// Backward comes in two halves, callable separately on the saved activations: backward_input (B) computes
// every input gradient, stage output to stage input, and leaves what the weight gradients need;
// backward_weight (W) computes the weight gradients and tells the gradient sink each unit is final. A
// zero-bubble pipeline schedule runs W later, in the bubble. backward() is, unit by unit, B then W — the
// same arithmetic in the same order, so the same bits.
// Parallelism plugs in through spine.hpp; the defaults make this the single-device model.
//
// Playbook: "First steps: training on one GPU" (memory, activation recomputation, gradient accumulation),
// "Pipeline parallelism" (ZeroBubble's B/W split). Test: `make test CH=01` (tests/01_single_gpu/test_model.cpp).
#pragma once
#include <memory>
#include <vector>

#include "model_config.hpp"
#include "model_layout.hpp"
#include "offload.hpp"
#include "precision.hpp"
#include "spine.hpp"

namespace penta {

class HfCheckpoint;  // hf_checkpoint.hpp (which includes this file)

struct ModelOptions {
    Recompute recompute = Recompute::none;
    AttentionKernel attention = AttentionKernel::flash;
    int tp = 1, tp_rank = 0;
    bool sequence_parallel = false;  // the norms' gradients are summed over tp (their tokens are split)
    // how tp cuts each tensor (nullptr: whole tensors, tp 1); chapter 04's tensor_parallel_options sets it
    const ShardingPlan* sharding = nullptr;
    PipelineSlice slice;
    // false: no full flat parameter / gradient buffer on this rank (params() / grads() stay undefined);
    // a ParamProvider / GradientSink must then serve them: ZeRO-3's gathered units, ZeRO-2's shard (ch03)
    bool resident_params = true, resident_grads = true;
    Precision precision;
    // where the first weights come from: nullptr, init_params keyed by the seed; or a checkpoint
    // (hf_checkpoint.hpp: --model DIR), each rank reading its slices
    std::shared_ptr<const HfCheckpoint> weights;
    // the layer's cores; they declare their weights, so they are chosen when the model is built
    std::shared_ptr<AttentionCore> attention_core;  // nullptr: LocalAttention(attention)
    std::shared_ptr<MlpCore> mlp_core;              // nullptr: DenseSwiGLU
    LayoutOptions layout() const { return LayoutOptions{tp, tp_rank, sequence_parallel, slice, sharding}; }
};

// What one decoder layer keeps for backward (N = B T tokens; widths local to a TP rank). With
// Recompute::full only x_in is kept and the backward refills the rest by rerunning the block; with
// Recompute::offload all of it is kept, on the host between the layer's forward and its backward.
struct LayerActs {
    Tensor x_in;       // (N, h) block input, read by the attention RMSNorm backward
    Tensor attn_rstd;  // (N) 1 / rms of x_in
    Tensor xn1;        // (Ng, h) normalised input of the q/k/v projections (gathered under SP)
    AttnActs attn;     // q, k, v, probs, out, lse
    Tensor x_mid;      // (N, h) residual after attention
    Tensor mlp_rstd;   // (N)
    Tensor xn2;        // (Ng, h) normalised input of the MLP
    std::unique_ptr<MlpActs> mlp;  // the MLP core's (dense: gate, up, act (Ng, f) each)
    Tensor d_xn1, d_xn2;  // B -> W: d loss / d the norms' outputs (N, h): their weight gradients read them
    // Recompute::offload: the buffers of all the above (x_in included), on the host from the end of this
    // layer's forward to the start of its backward
    std::vector<std::weak_ptr<Buffer>> offloaded;
};

struct HeadActs {
    Tensor x;        // (N, h) last layer's output
    Tensor rstd;     // (N)
    Tensor xn;       // (Ng, h) input of lm_head
    Tensor dlogits;  // (Ng, V) d loss / d logits, computed by the fused cross-entropy during forward
    Tensor d_xn;     // B -> W: d loss / d the final norm's output (N, h)
};

struct MicroBatchActs {
    MicroBatch mb;                  // B, T, tokens (read by the embedding backward), positions
    std::vector<LayerActs> layers;  // this stage's layers, in order
    HeadActs head;
    int chunk = 0;    // the model chunk of this rank's slice that ran (PipelineSlice; 0 unless a stage has several)
    Tensor output;    // (N, h) stage output when the chunk has no head (pipeline)
    Tensor d_embed;   // B -> W: d loss / d embedding output (N, h), the embedding's weight gradient reads it
    double global_tokens = 0;  // the loss's denominator this forward was given
    double loss = 0;      // sum of this micro-batch's token losses / global token count (the head's stage)
    double aux_loss = 0;  // what the MLP cores added (MoE load balancing); 0 for dense layers
    bool inputs_done = false;  // backward_input has run; backward_weight is due
};

class Model {
   public:
    Model(const LlamaConfig& cfg, Device device, uint64_t seed, const ModelOptions& opt = {});
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    const LlamaConfig& config() const { return cfg_; }
    const ModelOptions& options() const { return opt_; }
    const Precision& precision() const { return opt_.precision; }
    const ParamLayout& layout() const { return layout_; }
    // name, unit, offset, shape, decay, parallelism of every tensor: for the optimizer and checkpoints
    const std::vector<ParamTensor>& tensors() const { return layout_.tensors; }
    Device device() const { return device_; }
    uint64_t seed() const { return seed_; }  // what init_params was (or a shard's owner must be) keyed by
    int64_t n_params() const { return layout_.numel; }  // held here (a TP/PP shard holds a part)
    Tensor& params() { return params_; }
    Tensor& grads() { return grads_; }
    void zero_grads();
    // The first weights of `layout`'s tensors (this model's, or one unit's or shard's part of it) into flat:
    // what the constructor puts in params(), for a ZeRO-3 shard that holds no full buffer (ch03).
    void initial_weights(const ParamLayout& layout, Tensor& flat) const;
    // One unit's weights in the compute dtype outside any pass (export, inspection). With a gathering
    // provider (ZeRO-3) every rank of its group must call both, in the same order.
    Tensor unit_weights(int unit) { return acquire(unit, -1); }
    void release_unit(int unit) { release(unit); }

    // One micro-batch through this rank's slice (or through one model chunk of it, when the stage holds several:
    // PipelineSlice). global_tokens is the number of non-ignored targets in the
    // GLOBAL batch (all micro-batches, all data-parallel ranks): the loss and its gradient are divided by
    // it, never by a local count (ARCHITECTURE.md §6). A pipeline stage without the embedding reads hidden_in (N, h)
    // instead of tokens; one without the head returns its output in MicroBatchActs::output and takes
    // d loss / d output in backward. Keep mb's tokens alive until the backward (the embedding reads them).
    MicroBatchActs forward(const MicroBatch& mb, double global_tokens, const Tensor& hidden_in = {}, int chunk = 0);
    // B: every input gradient, head to embedding; returns d loss / d hidden_in for a stage without the
    // embedding (undefined otherwise). Keeps what backward_weight needs, drops the rest — including the
    // caller's doutput and the forward's hidden_in: a stage link must not reuse those buffers before W.
    Tensor backward_input(MicroBatchActs& acts, const Tensor& doutput = {});
    // W: the weight gradients, accumulated; each unit is handed to the gradient sink when final. Frees acts.
    void backward_weight(MicroBatchActs& acts);
    // B then W, unit by unit (so the sink hears of each unit as early as possible); frees acts layer by layer
    Tensor backward(MicroBatchActs& acts, const Tensor& doutput = {});

    // rows of the residual stream between the blocks, what a pipeline stage receives and sends: B·T tokens, or
    // this rank's 1/tp of them under sequence parallelism (its boundary splits the tokens)
    int64_t stage_rows(const MicroBatch& mb) const { return tp_->splits_tokens() ? mb.B * mb.T / opt_.tp : mb.B * mb.T; }

    // the same on whole sequences (positions 0..T-1): tokens, targets (B T) i32 on the model's device
    MicroBatchActs forward(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T, double global_tokens);
    double forward_backward(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T,
                            double global_tokens);  // returns this micro-batch's loss sum / global_tokens
    // evaluation: nothing saved, no gradients
    double forward_loss(const Tensor& tokens, const Tensor& targets, int64_t B, int64_t T, double global_tokens);
    // (B T, V) on the head's stage; a pipeline stage without the embedding reads hidden_in, one without the
    // head returns its output (B T, h) instead
    Tensor forward_logits(const Tensor& tokens, int64_t B, int64_t T, const Tensor& hidden_in = {});

    // generation (generate.hpp): a KV cache of every layer for `capacity` positions of one sequence
    // (Tag::activations), and n tokens (i32 on the model's device) at positions cache.len() ... + n - 1
    // through the whole model: their keys and values join the cache; returns their logits (n, V), or this
    // rank's vocabulary shard (n, V/tp). Every rank of a model-parallel group calls it (it communicates).
    KVCache kv_cache(int64_t capacity) const;
    Tensor decode(const Tensor& tokens, KVCache& cache);

    // Swap in a chapter's implementation of a seam (spine.hpp); nullptr restores the single-device
    // default. The model does not own what it is given. (The attention and MLP cores are chosen in
    // ModelOptions: they declare weights.)
    void set_boundary(TensorParallelBoundary* b);
    void set_param_provider(ParamProvider* p) { params_src_ = p ? p : default_params_.get(); }
    void set_gradient_sink(GradientSink* s) { sink_ = s ? s : default_sink_.get(); }
    void set_loss(LossCore* l) { loss_ = l ? l : default_loss_.get(); }
    void add_observer(ModelObserver* o) { observers_.push_back(o); }
    void remove_observer(ModelObserver* o);
    AttentionCore& attention() { return *attn_; }
    MlpCore& mlp() { return *mlp_; }
    const OffloadStats& offload_stats() const { return offload_; }  // Recompute::offload's bytes and seconds

   private:
    enum class Run { train, loss, logits };
    MicroBatchActs run_forward(Run run, const MicroBatch& mb, double global_tokens, const Tensor& hidden_in,
                               Tensor* logits, int chunk = 0, KVCache* cache = nullptr);
    Tensor run_backward(MicroBatchActs& acts, const Tensor& doutput, bool input, bool weight);
    // the unit's weights in the compute dtype; next: the unit acquired after it (-1: none), or by the pass's walk
    Tensor acquire(int unit, int next);
    Tensor acquire(int unit, Pass pass) { return acquire(unit, pass == Pass::forward ? next_forward_[unit] : next_backward_[unit]); }
    void release(int unit, bool again = false) { params_src_->release(unit, again); }
    std::vector<int> held_units(int64_t layer) const;    // the layer's units that hold tensors here
    LayerParams layer_params(int64_t layer, Pass pass);  // acquires every unit of the layer
    LayerParams layer_grads(int64_t layer);
    void release_layer(int64_t layer);
    void grads_ready(int64_t layer);  // every unit of the layer
    Tensor embed_forward(const Tensor& tokens, Tag tag);
    Tensor block_forward(const LayerParams& w, const MicroBatch& mb, double global_tokens, const Tensor& x_in,
                         LayerActs& a, Tag saved, Tag out_tag, bool keep_probs, KVCacheLayer* cache = nullptr);
    Tensor block_backward_input(const LayerParams& w, const MicroBatch& mb, LayerActs& a, const Tensor& dx_out,
                                Tag keep);
    void block_backward_weight(int64_t layer, LayerActs& a);
    double head_forward(Run run, HeadActs& acts, const Tensor& x, const Tensor& targets, double global_tokens,
                        Tensor* logits);
    Tensor head_backward_input(HeadActs& acts, Tag keep);
    void head_backward_weight(HeadActs& acts);
    // dw += the RMSNorm weight gradient; summed over tp first when the tensor's gradient is a partial sum there
    void norm_weight_grad(const ParamTensor& t, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& rstd);
    Tensor tensor_in(const Tensor& unit_flat, int unit, const std::string& role) const;  // one tensor of a unit's view
    Tensor lm_head_weight(const Tensor& head_flat, const Tensor& embedding_flat) const;
    bool tied_pass(int chunk) const;  // tied, and this chunk runs both the embedding and the head
    void notify(int unit, Pass pass, bool begin);

    LlamaConfig cfg_;
    ModelOptions opt_;
    Device device_;
    uint64_t seed_;
    std::shared_ptr<AttentionCore> attn_;
    std::shared_ptr<MlpCore> mlp_;
    ParamLayout layout_;
    Tensor params_, grads_;  // (n_params) flat, Tag::params / Tag::grads, in the policy's dtypes
    std::vector<int> next_forward_, next_backward_;  // per unit: the unit its chunk's pass acquires next (-1: none)
    int embedding_chunk_ = -1, head_chunk_ = -1;     // the chunks that run the embedding and the head (-1: none)

    std::unique_ptr<TensorParallelBoundary> default_tp_;
    std::unique_ptr<ParamProvider> default_params_;
    std::unique_ptr<GradientSink> default_sink_;
    std::unique_ptr<LossCore> default_loss_;
    TensorParallelBoundary* tp_;
    ParamProvider* params_src_;
    GradientSink* sink_;
    LossCore* loss_;
    std::vector<ModelObserver*> observers_;
    OffloadStats offload_;
};

}  // namespace penta
