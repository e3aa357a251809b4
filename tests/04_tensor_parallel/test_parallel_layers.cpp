// test_parallel_layers.cpp — the split rules of ColumnParallelLinear, RowParallelLinear and
// VocabParallelEmbedding (04_tensor_parallel/parallel_layers.hpp) are what the model's layout holds: every
// tensor of a tp shard is its kind's rule applied to the full tensor, q/k/v/gate/up column-parallel,
// o/down row-parallel, the embedding and lm_head vocab-parallel; a shard's initial values are the full
// tensor's slice; its weights are at or above the memory bound; a layout with tp > 1 and no plan is refused.
// Playbook: "Tensor parallelism" — "Tensor Parallelism in a Transformer Block".
//   build/bin/tests_04 -ts='ch04 np1'
#include "../../04_tensor_parallel/tp_install.hpp"
#include "../../common/train_loop.hpp"
#include "../testing.hpp"

using namespace penta;
using penta::testing::contains;
using penta::testing::error_of;

namespace {

LlamaConfig small_config(bool tied) {
    LlamaConfig c = preset("small");
    c.n_layers = 2;
    c.vocab = 257;  // not a multiple of tp: the last vocab shard has padding rows
    c.tied_embeddings = tied;
    return c;
}

}  // namespace

TEST_SUITE("ch04 np1") {

TEST_CASE("TP parallel layers: each tensor of a tp shard is its kind's split rule; the kinds are Megatron's") {
    for (bool tied : {true, false})
        for (int t : {2, 4})
            for (int r = 0; r < t; r++) {
                const LlamaConfig c = small_config(tied);
                const ParamLayout L = tensor_parallel_layout(c, t, r);
                CAPTURE(tied);
                CAPTURE(t);
                CAPTURE(r);
                for (const ParamTensor& p : L.tensors) {
                    CAPTURE(p.name);
                    TensorShard want{p.full_shape};
                    if (p.split == ColumnParallelLinear::kind) want = ColumnParallelLinear::shard(p.name, p.full_shape, t, r);
                    if (p.split == RowParallelLinear::kind) want = RowParallelLinear::shard(p.name, p.full_shape, t, r);
                    if (p.split == VocabParallelEmbedding::kind)
                        want = VocabParallelEmbedding::shard(p.name, p.full_shape, t, r);
                    CHECK(p.shape == want.shape);
                    CHECK(p.row0 == want.row0);
                    CHECK(p.col0 == want.col0);
                    CHECK(((p.sharded_on & kAxisTP) != 0) == (p.split != Split::replicated));
                }
                for (const char* col : {"q_proj", "k_proj", "v_proj"})
                    CHECK(L.find(strfmt("model.layers.1.self_attn.%s.weight", col)).split == ColumnParallelLinear::kind);
                CHECK(L.find("model.layers.1.self_attn.o_proj.weight").split == RowParallelLinear::kind);
                CHECK(L.find("model.layers.0.mlp.gate_proj.weight").split == ColumnParallelLinear::kind);
                CHECK(L.find("model.layers.0.mlp.up_proj.weight").split == ColumnParallelLinear::kind);
                CHECK(L.find("model.layers.0.mlp.down_proj.weight").split == RowParallelLinear::kind);
                CHECK(L.find("model.embed_tokens.weight").split == VocabParallelEmbedding::kind);
                if (!tied) CHECK(L.find("lm_head.weight").split == VocabParallelEmbedding::kind);
                CHECK(L.find("model.norm.weight").split == Split::replicated);
                // the vocabulary's rows: the padded vocab cut in t, as the loss reads them
                CHECK(L.vocab_rows == (c.vocab + t - 1) / t);
                CHECK(L.vocab_start == r * L.vocab_rows);
                const ParamTensor& wq = L.find("model.layers.0.self_attn.q_proj.weight");
                const ParamTensor& wo = L.find("model.layers.0.self_attn.o_proj.weight");
                CHECK((wq.shape == Shape{c.hidden / t, c.hidden} && wq.row0 == r * c.hidden / t));
                CHECK((wo.shape == Shape{c.hidden, c.hidden / t} && wo.col0 == r * c.hidden / t));
            }
}

TEST_CASE("TP parallel layers: tp=2 shards' initial values are slices of the full tensor") {
    const LlamaConfig cfg = small_config(false);
    const ParamLayout full = ParamLayout::build(cfg);
    Tensor pf = Tensor::empty({full.numel}, DType::f32, Device::cpu, Tag::workspace);
    init_params(full, 42, pf);
    const std::vector<float> F = pf.to_host();
    for (int rank = 0; rank < 2; rank++) {
        const ParamLayout shard = tensor_parallel_layout(cfg, 2, rank);
        Tensor ps = Tensor::empty({shard.numel}, DType::f32, Device::cpu, Tag::workspace);
        init_params(shard, 42, ps);
        const std::vector<float> S = ps.to_host();
        for (const ParamTensor& t : shard.tensors) {
            const ParamTensor& f = full.find(t.name);
            const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1, full_cols = f.shape.size() == 2 ? f.shape[1] : 1;
            const int64_t rows = std::min(t.shape[0], f.shape[0] - t.row0);  // vocab padding rows are not in F
            int64_t bad = 0;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++)
                    bad += S[t.offset + r * cols + c] != F[f.offset + (t.row0 + r) * full_cols + t.col0 + c];
            for (int64_t i = rows * cols; i < t.numel(); i++) bad += S[t.offset + i] != 0.0f;  // padding is zero
            CAPTURE(t.name);
            CAPTURE(rank);
            CHECK(bad == 0);
        }
    }
}

TEST_CASE("TP parallel layers: a shard's weights are at or above the memory bound; tp > 1 without the plan is refused") {
    for (bool tied : {true, false}) {
        LlamaConfig c = preset("small");
        c.n_layers = 5;
        c.tied_embeddings = tied;
        TrainConfig cfg;
        cfg.steps = 10, cfg.device = "cpu", cfg.tp = 2;
        const MemoryBound bound = memory_lower_bound(cfg, c, Device::cpu, 0);
        for (int r = 0; r < 2; r++) {
            Model m(c, Device::cpu, 1, tensor_parallel_options(ModelOptions{}, 2, r));
            const double weights = (double)m.params().nbytes();
            CAPTURE(tied);
            CAPTURE(r);
            CHECK(bound.weights <= weights);  // the norms are replicated, the rest halved
            CHECK(bound.weights >= 0.98 * weights);
        }
    }
    ModelOptions o;
    o.tp = 2;  // tp 2 without tensor_parallel_options: nothing says how to cut q_proj
    CHECK(contains(error_of([&] { Model(small_config(true), Device::cpu, 1, o); }),
                   "tp 2 needs a sharding plan that cuts it (chapter 04's tensor_parallel_options"));
}

}  // TEST_SUITE
