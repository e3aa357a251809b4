// model_layout.cpp — flat-buffer parameter layout and deterministic initialisation (model_layout.hpp).
//
// Init follows GPT-2: std 0.02 for every matrix, and 0.02 / sqrt(2 L) for the two projections that write
// into the residual stream (o_proj, down_proj), so the residual's variance does not grow with depth.
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='*layout*'`.
#include "model_layout.hpp"

#include <algorithm>
#include <cmath>

#include "ops.hpp"

namespace penta {

namespace {

// Adds the tensors of one unit; shards are cut from the full shape by `split`.
struct LayoutBuilder {
    ParamLayout& L;
    int unit;
    int64_t start;

    LayoutBuilder(ParamLayout& layout, int unit_id, std::string unit_name) : L(layout), unit(unit_id) {
        start = L.numel;
        L.units[unit].name = std::move(unit_name);
        L.units[unit].offset = start;
    }
    ~LayoutBuilder() { L.units[unit].numel = L.numel - start; }

    void add(std::string name, Shape full, Split split, float std, int64_t local_rows = -1) {
        ParamTensor t;
        t.name = std::move(name);
        t.unit = unit;
        t.offset = L.numel;
        t.full_shape = full;
        t.shape = full;
        t.split = split;
        t.init_std = std;
        t.decay = full.size() == 2;
        if (split == Split::rows) {
            t.shape[0] = local_rows >= 0 ? local_rows : full[0] / L.tp;
            t.row0 = L.tp_rank * t.shape[0];
        } else if (split == Split::cols) {
            t.shape[1] = full[1] / L.tp;
            t.col0 = L.tp_rank * t.shape[1];
        }
        L.numel += t.numel();
        L.units[unit].tensors.push_back((int)L.tensors.size());
        L.tensors.push_back(std::move(t));
    }
};

}  // namespace

ParamLayout ParamLayout::build(const LlamaConfig& cfg, int tp, int tp_rank, PipelineSlice slice) {
    cfg.validate();
    CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp, "tp rank %d must be in [0, tp %d)", tp_rank, tp);
    CHECK(cfg.n_heads % tp == 0, "tp %d must divide n_heads %lld", tp, (long long)cfg.n_heads);
    CHECK(cfg.n_kv_heads % tp == 0, "tp %d must divide n_kv_heads %lld (each rank needs whole kv heads)", tp,
          (long long)cfg.n_kv_heads);
    CHECK(cfg.ffn % tp == 0, "tp %d must divide ffn %lld", tp, (long long)cfg.ffn);
    if (slice.layer_end < 0) slice.layer_end = cfg.n_layers;
    CHECK(0 <= slice.layer_begin && slice.layer_begin <= slice.layer_end && slice.layer_end <= cfg.n_layers,
          "pipeline slice layers [%lld, %lld) must lie within [0, n_layers %lld]",
          (long long)slice.layer_begin, (long long)slice.layer_end, (long long)cfg.n_layers);
    CHECK(!(cfg.tied_embeddings && slice.has_head && !slice.has_embedding),
          "model %s has tied embeddings: the stage with the head must also hold the embedding",
          cfg.name.c_str());

    ParamLayout L;
    L.tp = tp, L.tp_rank = tp_rank, L.slice = slice;
    L.units.resize(cfg.n_layers + 2);
    L.vocab_rows = (cfg.vocab + tp - 1) / tp;
    L.vocab_start = tp_rank * L.vocab_rows;

    const int64_t h = cfg.hidden, hd = cfg.head_dim(), q_dim = cfg.n_heads * hd, kv_dim = cfg.n_kv_heads * hd;
    const float std = 0.02f, std_out = 0.02f / std::sqrt(2.0f * (float)cfg.n_layers);
    if (slice.has_embedding) {
        LayoutBuilder u(L, 0, "embedding");
        u.add("model.embed_tokens.weight", {cfg.vocab, h}, Split::rows, std, L.vocab_rows);
    }
    for (int64_t i = 0; i < cfg.n_layers; i++) {
        if (i < slice.layer_begin || i >= slice.layer_end) {  // not on this stage: an empty unit in place
            L.units[1 + i].name = "layer " + std::to_string(i);
            L.units[1 + i].offset = L.numel;
            continue;
        }
        LayoutBuilder u(L, 1 + (int)i, "layer " + std::to_string(i));
        const std::string p = "model.layers." + std::to_string(i) + ".";
        u.add(p + "input_layernorm.weight", {h}, Split::replicated, 0);
        u.add(p + "self_attn.q_proj.weight", {q_dim, h}, Split::rows, std);
        u.add(p + "self_attn.k_proj.weight", {kv_dim, h}, Split::rows, std);
        u.add(p + "self_attn.v_proj.weight", {kv_dim, h}, Split::rows, std);
        u.add(p + "self_attn.o_proj.weight", {h, q_dim}, Split::cols, std_out);
        u.add(p + "post_attention_layernorm.weight", {h}, Split::replicated, 0);
        u.add(p + "mlp.gate_proj.weight", {cfg.ffn, h}, Split::rows, std);
        u.add(p + "mlp.up_proj.weight", {cfg.ffn, h}, Split::rows, std);
        u.add(p + "mlp.down_proj.weight", {h, cfg.ffn}, Split::cols, std_out);
    }
    const int head = (int)cfg.n_layers + 1;
    if (slice.has_head) {
        LayoutBuilder u(L, head, "head");
        u.add("model.norm.weight", {h}, Split::replicated, 0);
        if (!cfg.tied_embeddings) u.add("lm_head.weight", {cfg.vocab, h}, Split::rows, std, L.vocab_rows);
    } else {
        L.units[head].name = "head";
        L.units[head].offset = L.numel;
    }
    return L;
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
    for (const auto& t : tensors)
        if (t.name == name) return t;
    FAIL("no parameter tensor named '%s' in this layout", name.c_str());
}

void init_params(const ParamLayout& layout, uint64_t seed, Tensor& flat) {
    CHECK(flat.numel() == layout.numel, "init_params: flat buffer has %lld elements, layout %lld",
          (long long)flat.numel(), (long long)layout.numel);
    Tensor host = flat.device() == Device::cpu
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
    if (host.buf != flat.buf) copy(flat, host);
}

}  // namespace penta
