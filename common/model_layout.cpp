// model_layout.cpp — flat-buffer parameter layout, declared by the model's parts, the grad-norm ownership
// rule and deterministic initialisation (model_layout.hpp).
//
// Init follows GPT-2: std 0.02 for every matrix, and 0.02 / sqrt(2 L) for the two projections that write
// into the residual stream (o_proj, down_proj), so the residual's variance does not grow with depth.
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='*layout*'`.
#include "model_layout.hpp"

#include <algorithm>
#include <cmath>

#include "grid.hpp"
#include "ops.hpp"
#include "spine.hpp"

namespace penta {

std::string axes_str(Axes a) {
    std::string s;
    const char* names[] = {"dp", "cp", "tp", "pp", "ep"};
    for (int i = 0; i < 5; i++)
        if (a & (1 << i)) s += (s.empty() ? "" : "|") + std::string(names[i]);
    return s.empty() ? "-" : s;
}

// ---- LayoutBuilder --------------------------------------------------------------------------------------

LayoutBuilder::LayoutBuilder(ParamLayout& layout, const LlamaConfig& cfg, const LayoutOptions& opt)
    : L_(layout), cfg_(cfg), opt_(opt) {}

int LayoutBuilder::begin_unit(const std::string& name, int64_t layer, bool held, Axes grad_summed_on,
                              Axes sharded_on) {
    ParamUnit u;
    u.name = name;
    u.layer = layer;
    u.grad_summed_on = grad_summed_on;
    u.sharded_on = sharded_on;
    L_.units.push_back(u);
    const int id = (int)L_.units.size() - 1;
    held_.push_back(held && (open_.empty() || held_[open_.back()]));
    open_.push_back(id);
    layer_ = layer;
    if (layer >= 0) {
        if ((int64_t)L_.layer_units.size() <= layer) L_.layer_units.resize(layer + 1);
        L_.layer_units[layer].push_back(id);
    }
    return id;
}

void LayoutBuilder::end_unit() {
    CHECK(!open_.empty(), "LayoutBuilder: end_unit without a unit begun");
    open_.pop_back();
    layer_ = open_.empty() ? -1 : L_.units[open_.back()].layer;
}

int LayoutBuilder::add(const std::string& role, Shape full, Split split, float init_std) {
    CHECK(!open_.empty(), "LayoutBuilder: tensor %s added outside a unit", role.c_str());
    const int unit = open_.back();
    if (!held_[unit]) return -1;
    ParamUnit& u = L_.units[unit];
    ParamTensor t;
    t.role = role;
    t.name = u.layer >= 0 ? "model.layers." + std::to_string(u.layer) + "." + role : role;
    t.unit = unit;
    t.full_shape = full;
    t.split = split;
    t.init_std = init_std;
    t.decay = full.size() == 2;
    // this rank's part of it: the plan's rule for its kind (chapter 04: ColumnParallelLinear, ...)
    const TensorShard s = plan().shard(t.name, split, full, L_.tp, L_.tp_rank);
    t.shape = s.shape, t.row0 = s.row0, t.col0 = s.col0;
    // each pipeline stage holds its own tensors; tp cuts the split ones; the replicated ones, under sequence
    // parallelism, see only this rank's tokens, so their gradient is a partial sum over tp as well
    t.sharded_on = kAxisPP | u.sharded_on | (split == Split::replicated ? 0 : kAxisTP);
    t.grad_summed_on = u.grad_summed_on | (split == Split::replicated && opt_.sequence_parallel ? kAxisTP : 0);
    // DualPipe's two copies of the model: the mirror stage computes the other part of every gradient
    using Mirror = PipelineSlice::Mirror;
    if (opt_.slice.mirror != Mirror::none) t.grad_summed_on |= kAxisPP;
    if (opt_.slice.mirror == Mirror::replica) t.sharded_on &= ~kAxisPP;
    u.tensors.push_back((int)L_.tensors.size());
    L_.tensors.push_back(std::move(t));
    return (int)L_.tensors.size() - 1;
}

void LayoutBuilder::finish() {
    CHECK(open_.empty(), "LayoutBuilder: %zu units not ended", open_.size());
    int64_t at = 0;
    for (ParamUnit& u : L_.units) {
        u.offset = at;
        for (int i : u.tensors) {
            L_.tensors[i].offset = at;
            at += L_.tensors[i].numel();
        }
        u.numel = at - u.offset;
    }
    L_.numel = at;
}

// ---- ParamLayout ----------------------------------------------------------------------------------------

TensorShard WholeTensors::shard(const std::string& name, Split split, const Shape& full, int tp, int) const {
    CHECK(tp == 1 || split == Split::replicated,
          "%s: tp %d needs a sharding plan that cuts it (chapter 04's tensor_parallel_options: MegatronSharding)",
          name.c_str(), tp);
    return TensorShard{full};
}

const ShardingPlan& whole_tensors() {
    static const WholeTensors plan;
    return plan;
}

const ShardingPlan& LayoutBuilder::plan() const { return opt_.sharding ? *opt_.sharding : whole_tensors(); }

ParamLayout ParamLayout::build(const LlamaConfig& cfg, int tp, int tp_rank, PipelineSlice slice,
                               const ShardingPlan* sharding) {
    LayoutOptions o;
    o.tp = tp, o.tp_rank = tp_rank, o.slice = slice, o.sharding = sharding;
    return build(cfg, o);
}

ParamLayout ParamLayout::whole(const LlamaConfig& cfg, const AttentionCore* attention, const MlpCore* mlp) {
    LayoutOptions o;
    o.whole = true;
    return build(cfg, o, attention, mlp);
}

ParamLayout ParamLayout::build(const LlamaConfig& cfg, const LayoutOptions& opt, const AttentionCore* attention,
                               const MlpCore* mlp) {
    cfg.validate();
    const int tp = opt.tp, tp_rank = opt.tp_rank;
    PipelineSlice slice = opt.slice;
    CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp, "tp rank %d must be in [0, tp %d)", tp_rank, tp);
    CHECK(cfg.n_heads % tp == 0, "tp %d must divide n_heads %lld", tp, (long long)cfg.n_heads);
    CHECK(cfg.n_kv_heads % tp == 0, "tp %d must divide n_kv_heads %lld (each rank needs whole kv heads)", tp,
          (long long)cfg.n_kv_heads);
    CHECK(cfg.ffn % tp == 0, "tp %d must divide ffn %lld", tp, (long long)cfg.ffn);
    if (slice.layer_end < 0) slice.layer_end = cfg.n_layers;
    CHECK(0 <= slice.layer_begin && slice.layer_begin <= slice.layer_end && slice.layer_end <= cfg.n_layers,
          "pipeline slice layers [%lld, %lld) must lie within [0, n_layers %lld]",
          (long long)slice.layer_begin, (long long)slice.layer_end, (long long)cfg.n_layers);
    for (int c = 1; c < slice.chunks(); c++) {
        const LayerRange r = slice.chunk(c);
        CHECK(0 <= r.begin && r.begin < r.end && r.end <= cfg.n_layers,
              "pipeline slice chunk %d: layers [%lld, %lld) must be a non-empty range within [0, n_layers %lld]", c,
              (long long)r.begin, (long long)r.end, (long long)cfg.n_layers);
        for (int d = 0; d < c; d++) {
            const LayerRange o = slice.chunk(d);
            CHECK(r.end <= o.begin || o.end <= r.begin, "pipeline slice chunks %d [%lld, %lld) and %d [%lld, %lld) overlap",
                  d, (long long)o.begin, (long long)o.end, c, (long long)r.begin, (long long)r.end);
        }
    }
    CHECK(!slice.has_embedding || slice.embedding_chunk() >= 0,
          "pipeline slice: the embedding needs a chunk that starts at layer 0");
    CHECK(!slice.has_head || slice.head_chunk(cfg.n_layers) >= 0,
          "pipeline slice: the head needs a chunk that ends at the last layer %lld", (long long)cfg.n_layers);
    static const LocalAttention default_attention(AttentionKernel::flash);
    static const DenseSwiGLU default_mlp;
    if (!attention) attention = &default_attention;
    if (!mlp) mlp = &default_mlp;

    ParamLayout L;
    L.tp = tp, L.tp_rank = tp_rank, L.slice = slice;
    LayoutOptions resolved = opt;
    resolved.slice = slice;
    LayoutBuilder b(L, cfg, resolved);

    const int64_t h = cfg.hidden;
    const TensorShard vocab = b.plan().shard("the vocabulary", Split::vocab, {cfg.vocab, h}, tp, tp_rank);
    L.vocab_rows = vocab.shape[0], L.vocab_start = vocab.row0;  // this rank's rows of the embedding and lm_head
    const float std = 0.02f;
    // a tied model's stage with the head but not the embedding keeps a replica of the table for its lm_head, in
    // the embedding unit, so the two copies are cut alike (ZeRO's shards of the unit match); it initialises to
    // the same values (same name), and the two stages' gradients of it are summed (pp)
    const bool replica = cfg.tied_embeddings && slice.has_head && !slice.has_embedding;
    b.begin_unit("embedding", -1, slice.has_embedding || replica);
    const int emb = b.add("model.embed_tokens.weight", {cfg.vocab, h}, Split::vocab, std);
    if (emb >= 0 && cfg.tied_embeddings && slice.has_head != slice.has_embedding) {
        b.tensor(emb).grad_summed_on |= kAxisPP;                // each of the two stages computes a part
        if (replica) b.tensor(emb).sharded_on &= ~kAxisPP;      // counted in the norm on the first stage only
    }
    b.end_unit();
    // the decoder block: its two norms, and what its attention and MLP cores declare between them
    for (int64_t i = 0; i < cfg.n_layers; i++) {
        b.begin_unit("layer " + std::to_string(i), i, slice.holds_layer(i));
        b.add("input_layernorm.weight", {h}, Split::replicated, 0);
        attention->declare(b);
        b.add("post_attention_layernorm.weight", {h}, Split::replicated, 0);
        mlp->declare(b);
        b.end_unit();
    }
    b.begin_unit("head", -1, slice.has_head);
    b.add("model.norm.weight", {h}, Split::replicated, 0);
    if (!cfg.tied_embeddings) b.add("lm_head.weight", {cfg.vocab, h}, Split::vocab, std);
    b.end_unit();
    b.finish();
    return L;
}

bool PipelineSlice::holds_layer(int64_t layer) const {
    for (int c = 0; c < chunks(); c++)
        if (layer >= chunk(c).begin && layer < chunk(c).end) return true;
    return false;
}

int PipelineSlice::embedding_chunk() const {
    if (!has_embedding) return -1;
    for (int c = 0; c < chunks(); c++)
        if (chunk(c).begin == 0) return c;
    return -1;
}

int PipelineSlice::head_chunk(int64_t n_layers) const {
    if (!has_head) return -1;
    for (int c = 0; c < chunks(); c++)
        if (chunk(c).end == n_layers || (c == 0 && layer_end < 0)) return c;
    return -1;
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
    for (const auto& t : tensors)
        if (t.name == name) return t;
    FAIL("no parameter tensor named '%s' in this layout", name.c_str());
}

int ParamLayout::find_in_unit(int unit, const std::string& role) const {
    for (int t : units.at(unit).tensors)
        if (tensors[t].role == role) return t;
    return -1;
}

bool counts_in_grad_norm(const ParamTensor& t, const GridCoords& c, Axes optimizer_sharded) {
    const Axes sharded = t.sharded_on | optimizer_sharded;
    if (!(sharded & kAxisTP) && c.tp != 0) return false;
    if (!(sharded & kAxisPP) && c.pp != 0) return false;  // a tied replica counts on the first stage only
    if (t.sharded_on & kAxisEP) return (sharded & (kAxisDP | kAxisCP)) || c.edp == 0;
    if (!(sharded & kAxisDP) && c.dp != 0) return false;
    if (!(sharded & kAxisCP) && c.cp != 0) return false;
    return true;
}

void init_params(const ParamLayout& layout, uint64_t seed, Tensor& flat) {
    CHECK(flat.numel() == layout.numel, "init_params: flat buffer has %lld elements, layout %lld",
          (long long)flat.numel(), (long long)layout.numel);
    Tensor host = flat.device() == Device::cpu && flat.dtype == DType::f32
                      ? flat
                      : Tensor::empty({layout.numel}, DType::f32, Device::cpu, Tag::workspace);
    for (const auto& t : layout.tensors) {
        Tensor x = host.flat(t.offset, t.numel()).view(t.shape);
        if (t.init_std == 0) {
            fill(x, 1.0f);
            continue;
        }
        // vocab-parallel shards of a vocab that tp does not divide end in padding rows, which stay zero
        const int64_t rows = std::min(t.shape[0], std::max<int64_t>(0, t.full_shape[0] - t.row0));
        if (rows < t.shape[0]) {
            Tensor pad = x.slice(rows, t.shape[0] - rows);
            fill(pad, 0.0f);
        }
        if (rows > 0) {
            Tensor valid = x.slice(0, rows);
            init_normal(valid, seed, name_stream(t.name), t.init_std, t.row0, t.col0, t.full_shape[1]);
        }
    }
    store_params(host, flat);
}

void store_params(const Tensor& host, Tensor& flat) {
    if (host.buf == flat.buf) return;
    if (flat.dtype == DType::f32) {
        copy(flat, host);
        return;
    }
    Tensor on_device = flat.device() == Device::cpu ? host : host.clone(flat.device(), Tag::workspace);
    convert(flat, on_device);  // the f32 values rounded to the parameter dtype (bf16: round to nearest even)
}

}  // namespace penta
