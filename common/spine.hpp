// spine.hpp — the seams through which parallelism enters the one decoder of model.cpp (ARCHITECTURE.md §3).
//
// The block is written once; each later chapter swaps in its own implementation of one of these:
//   TensorParallelBoundary  Megatron's f and g around column/row-parallel linears (ch04), SP's
//                           all-gather / reduce-scatter along the sequence (ch05)
//   AttentionCore           the attention sublayer: its q/k/v/o weights, RoPE and the kernel; local causal
//                           attention here, ring / all-gather attention for CP (ch06) overrides the kernel
//   MlpCore                 dense SwiGLU here; MoE with expert-parallel all-to-all (ch08)
//   ParamProvider           the resident flat buffer here; ZeRO-3's all-gather + prefetch (ch03)
//   GradientSink            nothing here; DP's bucketed all-reduce / ZeRO's reduce-scatter (ch02, ch03)
//   LossCore                local fused cross-entropy here; vocab-parallel cross-entropy (ch04)
// and observers (ModelObserver: traffic meters, timers) watch the passes without occupying any seam.
// The cores DECLARE their weights (declare(LayoutBuilder&)), so a MoE core can bring a router and experts
// in a unit of their own. Every backward is split in two (B then W, for zero-bubble pipelines): the
// input gradient, which the previous layer waits for, and the weight gradient, which nobody waits for.
// The single-device defaults below do no communication, so the model on one device is the same code
// that runs inside every parallel layout.
// Playbook: "Tensor parallelism", "Sequence parallelism", "Context parallelism", "ZeRO", "Data
// parallelism", "Expert parallelism", "Pipeline parallelism" (zero bubble). Test: `make test CH=01`.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model_config.hpp"
#include "model_layout.hpp"
#include "tensor.hpp"

namespace penta {

// One micro-batch as the model sees it: B sequences of which this rank holds T tokens each; token row
// n = b·T + t. A sharder (schedule.hpp) decides which tokens a rank holds: context parallelism holds
// chunks of every sequence, so each token carries its position in the sequence (RoPE, the causal mask).
struct MicroBatch {
    int64_t index = 0;       // its number within the step
    int64_t B = 0, T = 0;
    Tensor tokens, targets;  // (B T) i32 on the model's device; targets of -1 are ignored
    Tensor positions;        // (T) i32 positions of the held tokens in their sequence (the same for every b)
    // positions 0..T-1: every sequence whole, as one device (or dp, tp) holds it
    static MicroBatch whole(Tensor tokens, Tensor targets, int64_t B, int64_t T, int64_t index = 0);
};

// One layer's parameters (or their gradients) as its parts see them: each tensor found by its role
// ("self_attn.q_proj.weight"), in the flat views of the layer's units.
class LayerParams {
   public:
    LayerParams(const ParamLayout& layout, int64_t layer) : layout_(&layout), layer_(layer) {}
    void add_unit(int unit, const Tensor& flat) { units_.push_back({unit, flat}); }
    Tensor operator[](const std::string& role) const;  // throws naming the role and the layer when absent
    Tensor find(const std::string& role) const;        // undefined when absent
    int64_t layer() const { return layer_; }           // the decoder layer (a core shared by every layer reads it)

   private:
    const ParamLayout* layout_;
    int64_t layer_;
    std::vector<std::pair<int, Tensor>> units_;
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
    // true when the ranks between boundaries hold different tokens (sequence parallelism): then a
    // replicated weight's gradient (the norms; ParamTensor::grad_summed_on has tp) is only this rank's
    // tokens' share, and sum_token_split_grad sums it over the group. Identity when the tokens are whole.
    virtual bool splits_tokens() const { return false; }
    virtual void sum_token_split_grad(Tensor& partial) {}
};

// What the attention sublayer keeps for backward, and what its input-gradient pass leaves for the weight
// gradients (Ng tokens: N, or N·tp gathered under SP; widths local to a tensor-parallel rank).
struct AttnActs {
    Tensor q;         // (Ng, nh hd) after RoPE
    Tensor k, v;      // (Ng, nkv hd), k after RoPE
    Tensor probs;     // (B, nh, T, T) only with Recompute::none and a kernel that materialises them
    Tensor out;       // (Ng, nh hd) input of o_proj
    Tensor lse;       // (B, nh, T) log-sum-exp of the scores: rebuilds the probabilities in backward
    Tensor d_y;       // B -> W: d loss / d o_proj output (Ng, h)
    Tensor d_q, d_k;  // B -> W: d loss / d q, k before RoPE
    Tensor d_v;       // B -> W: d loss / d v
};

// Generation's KV cache (Model::decode): one layer's keys (after RoPE) and values of the `len` tokens seen
// so far, rows of (capacity, nkv hd) on the model's device (this rank's kv heads under TP).
struct KVCacheLayer {
    Tensor k, v;
    int64_t len = 0;
};
struct KVCache {
    std::vector<KVCacheLayer> layers;  // one per decoder layer
    int64_t capacity = 0;
    int64_t len() const { return layers.empty() ? 0 : layers[0].len; }
};

// The attention sublayer between the TP boundaries: x (Ng, h) normalised -> y (Ng, h), this rank's heads'
// part of the output (a partial sum under TP). q/k/v are column-parallel, o row-parallel; RoPE rotates q, k
// by each token's position; attend() is the kernel, the one piece context parallelism replaces.
class AttentionCore {
   public:
    virtual ~AttentionCore() = default;
    // q_proj, k_proj, v_proj, o_proj of the layer being declared (Llama GQA, no biases)
    virtual void declare(LayoutBuilder& b) const;
    // forward allocates what it keeps in `a` with `saved` (activations, or workspace while recomputing /
    // evaluating); keep_probs: keep the probabilities (only a kernel that materialises them has any).
    // cache (generation): the tokens' keys and values join it, and they attend to every cached token with
    // the local flash kernel (one sequence, mb.B = 1, its positions from cache->len on)
    Tensor forward(const LlamaConfig& c, const LayerParams& w, const MicroBatch& mb, const Tensor& x, AttnActs& a,
                   Tag saved, bool keep_probs, KVCacheLayer* cache = nullptr);
    // B: d loss / d x (Ng, h) from dy (Ng, h); leaves in `a` what backward_weight needs, tagged `keep`
    Tensor backward_input(const LlamaConfig& c, const LayerParams& w, const MicroBatch& mb, AttnActs& a,
                          const Tensor& dy, Tag keep);
    // W: accumulates the weight gradients into g from x and what B left; no weight is read
    void backward_weight(LayerParams& g, const Tensor& x, AttnActs& a);
    // RoPE's inverse frequencies (hd/2) on the model's device (rope.hpp); the model sets them when built
    void set_rope(Tensor inv_freq) { inv_freq_ = std::move(inv_freq); }
    const Tensor& rope() const { return inv_freq_; }

    // true when attend() materialises the (T, T) probabilities, so keeping them saves recomputation
    virtual bool materialises_probs() const = 0;
    // q (B, T, nh, hd), k, v (B, T, nkv, hd) -> out (B, T, nh, hd), lse (B, nh, T); positions (T) of the
    // held tokens; probs (B, nh, T, T) non-null when the model keeps them
    virtual void attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& out,
                        Tensor& lse, Tensor* probs) = 0;
    // dq, dk, dv are ACCUMULATED (pass zeros); probs as saved by attend, or nullptr to recompute
    virtual void attend_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& positions, const Tensor& out, const Tensor& lse, const Tensor* probs,
                                 Tensor& dq, Tensor& dk, Tensor& dv) = 0;

   private:
    Tensor inv_freq_;
};

// What an MLP core keeps for backward: each core its own (DenseSwiGLU::Acts; a MoE core its routing).
// aux_loss: a loss term the core adds (MoE load balancing), already scaled as the core wants it counted;
// the core's own backward carries its gradient.
struct MlpActs {
    virtual ~MlpActs() = default;
    double aux_loss = 0;
};

// The MLP of a block between its enter and exit boundaries: x (Ng, h) normalised -> y (Ng, h), a partial
// sum under TP.
class MlpCore {
   public:
    virtual ~MlpCore() = default;
    virtual void declare(LayoutBuilder& b) const = 0;
    // true when forward may set MlpActs::aux_loss (a MoE core): the step then reports it, summed over ranks
    virtual bool has_aux_loss() const { return false; }
    // what a Hugging Face export of this core would lose, for --export-hf's refusal ("": nothing); a MoE
    // core's per-expert routing bias, which transformers' Mixtral has no place for
    virtual std::string hf_export_gap() const { return ""; }
    // forward allocates what it keeps with `saved`; returns it, and y through the argument. mb and
    // global_tokens (the loss's denominator) let a core scale its aux loss the layout-independent way the
    // model scales the loss.
    virtual std::unique_ptr<MlpActs> forward(const LlamaConfig& c, const LayerParams& w, const MicroBatch& mb,
                                             double global_tokens, const Tensor& x, Tensor& y, Tag saved) = 0;
    // B: d loss / d x (Ng, h); leaves in acts what backward_weight needs, tagged `keep`
    virtual Tensor backward_input(const LayerParams& w, MlpActs& acts, const Tensor& dy, Tag keep) = 0;
    // W: accumulates the weight gradients into g; reads x and what B left, no weight
    virtual void backward_weight(LayerParams& g, const Tensor& x, MlpActs& acts) = 0;
};

// A unit's parameters as one flat view (in the parameter dtype), valid between acquire and release.
struct ParamProvider {
    virtual ~ParamProvider() = default;
    // next: the unit the model will acquire after this one in this pass (-1: none), so a provider that
    // gathers (ZeRO-3) can start fetching it while this one computes: the model says where its walk goes,
    // whatever slice (a pipeline stage) or order (forward, backward, 1F1B) it is in
    virtual Tensor acquire(int unit, int next) = 0;
    // again: the same pass will acquire the unit once more (the tied embedding, read again by the head);
    // a provider that gathers may keep it instead of fetching it twice
    virtual void release(int unit, bool again = false) = 0;
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

// The passes the model runs over a unit, for observers.
enum class Pass : uint8_t { forward, backward_input, backward_weight };
const char* pass_name(Pass p);

// Watches the model work unit by unit (meters, timers): begin and end bracket one pass over one unit (a
// layer's pass is reported once, under its first unit). Observers never change what the model computes.
struct ModelObserver {
    virtual ~ModelObserver() = default;
    virtual void unit_begin(int unit, Pass pass) {}
    virtual void unit_end(int unit, Pass pass) {}
};

// The backward of a linear whose input x also feeds other linears (q/k/v, gate/up): dx += dy W
// (accumulated, unlike linear_backward's overwrite). The input-gradient half only.
void linear_backward_input_add(const Tensor& dy, const Tensor& W, Tensor& dx);

// ---- single-device defaults ---------------------------------------------------------------------------

struct IdentityBoundary : TensorParallelBoundary {
    Tensor enter_forward(const Tensor& x) override { return x; }
    Tensor enter_backward(const Tensor& dx) override { return dx; }
    Tensor exit_forward(const Tensor& y_partial) override { return y_partial; }
    Tensor exit_backward(const Tensor& dy) override { return dy; }
};

// The whole sequence is local: the naive or the flash kernel of ops.hpp.
class LocalAttention : public AttentionCore {
   public:
    explicit LocalAttention(AttentionKernel kernel) : kernel_(kernel) {}
    bool materialises_probs() const override { return kernel_ == AttentionKernel::naive; }
    void attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& out, Tensor& lse,
                Tensor* probs) override;
    void attend_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                         const Tensor& out, const Tensor& lse, const Tensor* probs, Tensor& dq, Tensor& dk,
                         Tensor& dv) override;

   private:
    AttentionKernel kernel_;
};

// The names of a SwiGLU's three matrices after its prefix: Llama's, or Mixtral's experts' w1 (gate), w3 (up),
// w2 (down).
struct SwiGLUNames {
    std::string gate = "gate_proj.weight", up = "up_proj.weight", down = "down_proj.weight";
};

// act = silu(x W_gate^T) * (x W_up^T); y = act W_down^T. Its tensors are prefix + "gate_proj.weight", ...
// ("mlp." in a Llama layer; a MoE core builds its experts from DenseSwiGLUs with prefixes, names and widths
// of their own). width: the intermediate size f (-1: the model's ffn).
class DenseSwiGLU : public MlpCore {
   public:
    explicit DenseSwiGLU(std::string prefix = "mlp.", SwiGLUNames names = {}, int64_t width = -1)
        : prefix_(std::move(prefix)), names_(std::move(names)), width_(width) {}
    struct Acts : MlpActs {
        Tensor gate, up, act;   // (Ng, f) each
        Tensor d_y;             // B -> W: d loss / d down_proj output (Ng, h)
        Tensor d_gate, d_up;    // B -> W: (Ng, f)
    };
    void declare(LayoutBuilder& b) const override;
    std::unique_ptr<MlpActs> forward(const LlamaConfig& c, const LayerParams& w, const MicroBatch& mb,
                                     double global_tokens, const Tensor& x, Tensor& y, Tag saved) override;
    Tensor backward_input(const LayerParams& w, MlpActs& acts, const Tensor& dy, Tag keep) override;
    void backward_weight(LayerParams& g, const Tensor& x, MlpActs& acts) override;

   private:
    std::string prefix_;
    SwiGLUNames names_;
    int64_t width_;
};

// Parameters resident in the flat buffer: acquire is a view, release nothing. Holds a reference to the
// owner's buffer, so a buffer the owner replaces (a loaded checkpoint) is what acquire sees.
class ResidentParams : public ParamProvider {
   public:
    ResidentParams(const ParamLayout& layout, const Tensor& params) : layout_(layout), params_(params) {}
    Tensor acquire(int unit, int next) override;
    void release(int, bool) override {}

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
