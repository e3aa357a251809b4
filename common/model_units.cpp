// model_units.cpp — the model's bookkeeping (model.hpp): construction (the layout its cores declare, the
// flat buffers in the precision policy's dtypes, the single-device seams), the walk each pass takes over the
// units (so a gathering provider knows what comes next), and fetching a unit's weights and gradients
// through the seams. The arithmetic of the passes is in model.cpp.
// Playbook: "First steps: training on one GPU", "ZeRO" (the walk ZeRO-3 prefetches along).
// Test: `make test CH=01`.
#include <algorithm>

#include "hf_checkpoint.hpp"
#include "model.hpp"
#include "ops.hpp"
#include "rope.hpp"

namespace penta {

Model::Model(const LlamaConfig& cfg, Device device, uint64_t seed, const ModelOptions& opt)
    : cfg_(cfg), opt_(opt), device_(device), seed_(seed) {
    opt_.precision.validate();
    CHECK(!cfg.moe.enabled() || opt.mlp_core,
          "model %s is a mixture of experts (%lld experts, %lld per token): it trains with chapter 08's MoE layer "
          "(08_expert_parallel), not the dense MLP of this program", cfg.name.c_str(), (long long)cfg.moe.experts,
          (long long)cfg.moe.top_k);
    attn_ = opt.attention_core ? opt.attention_core : std::make_shared<LocalAttention>(opt.attention);
    mlp_ = opt.mlp_core ? opt.mlp_core : std::make_shared<DenseSwiGLU>();
    attn_->set_rope(rope_inv_freq_tensor(cfg, device));  // made once, on the model's device
    layout_ = ParamLayout::build(cfg, opt.layout(), attn_.get(), mlp_.get());
    if (opt.weights) opt.weights->check(ParamLayout::whole(cfg, attn_.get(), mlp_.get()));
    if (opt.resident_params) {
        params_ = Tensor::empty({layout_.numel}, opt_.precision.param, device_, Tag::params);
        initial_weights(layout_, params_);
    }
    if (opt.resident_grads) grads_ = Tensor::zeros({layout_.numel}, opt_.precision.grad, device_, Tag::grads);
    default_tp_ = std::make_unique<IdentityBoundary>();
    default_params_ = std::make_unique<ResidentParams>(layout_, params_);
    default_sink_ = std::make_unique<ResidentGrads>(layout_, grads_);
    default_loss_ = std::make_unique<LocalCrossEntropy>();
    tp_ = default_tp_.get();
    params_src_ = default_params_.get();
    sink_ = default_sink_.get();
    loss_ = default_loss_.get();

    // the order each pass acquires units in, so a provider that gathers knows what comes next: forward
    // walks embedding, layers, head; the input-gradient pass walks head, layers down (the embedding's
    // backward reads no weights). A layer's own unit comes before any unit a core added for it. A stage with
    // several model chunks walks each in its own passes (every unit belongs to one chunk).
    const PipelineSlice& s = layout_.slice;
    embedding_chunk_ = s.embedding_chunk();
    head_chunk_ = s.head_chunk(cfg_.n_layers);
    next_forward_.assign(layout_.units.size(), -1);
    next_backward_.assign(layout_.units.size(), -1);
    for (int c = 0; c < s.chunks(); c++) {
        const LayerRange r = s.chunk(c);
        std::vector<int> fwd, bwd;
        if (c == embedding_chunk_) fwd.push_back(layout_.embedding_unit());
        for (int64_t i = r.begin; i < r.end; i++)
            for (int u : held_units(i)) fwd.push_back(u);
        if (c == head_chunk_) {
            fwd.push_back(layout_.head_unit());
            bwd.push_back(layout_.head_unit());
        }
        for (int64_t i = r.end - 1; i >= r.begin; i--)
            for (int u : held_units(i)) bwd.push_back(u);
        for (size_t k = 0; k + 1 < fwd.size(); k++) next_forward_[fwd[k]] = fwd[k + 1];
        for (size_t k = 0; k + 1 < bwd.size(); k++) next_backward_[bwd[k]] = bwd[k + 1];
    }
}

void Model::initial_weights(const ParamLayout& layout, Tensor& flat) const {
    if (opt_.weights)
        opt_.weights->fill(layout, flat);
    else
        init_params(layout, seed_, flat);
}

KVCache Model::kv_cache(int64_t capacity) const {
    KVCache c;
    c.capacity = capacity;
    for (int64_t i = 0; i < cfg_.n_layers; i++) {
        const int64_t kv_dim = cfg_.n_kv_heads / opt_.tp * cfg_.head_dim();  // this rank's kv heads
        c.layers.push_back({Tensor::empty({capacity, kv_dim}, opt_.precision.act, device_, Tag::activations),
                            Tensor::empty({capacity, kv_dim}, opt_.precision.act, device_, Tag::activations), 0});
    }
    return c;
}

void Model::zero_grads() {
    if (grads_.defined()) fill(grads_, 0.0f);  // else the gradient sink owns (and zeroes) them
}

void Model::set_boundary(TensorParallelBoundary* b) {
    CHECK(!b || !b->splits_tokens() || opt_.sequence_parallel,
          "a boundary that splits the tokens (sequence parallelism) needs a model built with "
          "ModelOptions::sequence_parallel, so the norms' gradients are summed over tp");
    tp_ = b ? b : default_tp_.get();
}

void Model::remove_observer(ModelObserver* o) {
    observers_.erase(std::remove(observers_.begin(), observers_.end(), o), observers_.end());
}

void Model::notify(int unit, Pass pass, bool begin) {
    for (ModelObserver* o : observers_) begin ? o->unit_begin(unit, pass) : o->unit_end(unit, pass);
}

Tensor Model::acquire(int unit, int next) {
    Tensor p = params_src_->acquire(unit, next);
    if (p.dtype == opt_.precision.act) return p;
    // weights stored in another dtype than the compute's (bf16 weights, f32 matmuls): a transient copy
    Tensor c = Tensor::empty({p.numel()}, opt_.precision.act, device_, Tag::workspace);
    convert(c, p);
    return c;
}

std::vector<int> Model::held_units(int64_t layer) const {
    std::vector<int> held;  // a core may declare a unit with no tensor on this rank (a MoE rank without experts)
    for (int u : layout_.layer_units[layer])
        if (layout_.units[u].numel > 0) held.push_back(u);
    return held;
}

LayerParams Model::layer_params(int64_t layer, Pass pass) {
    LayerParams w(layout_, layer);
    for (int u : held_units(layer)) w.add_unit(u, acquire(u, pass));
    return w;
}

LayerParams Model::layer_grads(int64_t layer) {
    LayerParams g(layout_, layer);
    for (int u : held_units(layer)) g.add_unit(u, sink_->grads(u));
    return g;
}

void Model::release_layer(int64_t layer) {
    for (int u : held_units(layer)) release(u);
}

void Model::grads_ready(int64_t layer) {
    for (int u : held_units(layer)) sink_->layer_grads_ready(u);
}

Tensor Model::tensor_in(const Tensor& unit_flat, int unit, const std::string& role) const {
    const int t = layout_.find_in_unit(unit, role);
    CHECK(t >= 0, "unit %s has no tensor %s", layout_.units[unit].name.c_str(), role.c_str());
    const ParamTensor& p = layout_.tensors[t];
    return unit_flat.flat(p.offset - layout_.units[unit].offset, p.numel()).view(p.shape);
}

bool Model::tied_pass(int chunk) const {
    return cfg_.tied_embeddings && chunk == embedding_chunk_ && chunk == head_chunk_;
}

// untied: the head's own (V, h) matrix; tied: the embedding unit's table (a replica on a pipeline stage that
// has the head but not the embedding)
Tensor Model::lm_head_weight(const Tensor& head_flat, const Tensor& embedding_flat) const {
    if (!cfg_.tied_embeddings) return tensor_in(head_flat, layout_.head_unit(), "lm_head.weight");
    return tensor_in(embedding_flat, layout_.embedding_unit(), "model.embed_tokens.weight");
}

}  // namespace penta
