// test_hf_mixtral.cpp — chapter 08's mixture of experts out to Hugging Face and back: --export-hf writes a
// Mixtral (model_type "mixtral", its expert keys, block_sparse_moe tensor names) that transformers'
// MixtralForCausalLM loads with our logits, and that pentatron reloads bit for bit; what Mixtral has no place
// for (shared experts, sigmoid scores, dense layers first, a routing bias, ...) is refused by name before a
// file is written. On 2 and 4 ranks at ep 2 and ep 4 (each rank holding E/ep experts): the export is the
// one-rank export byte for byte and reloads bit for bit; transformers' save_pretrained Mixtral loads with
// transformers' logits and loss, and our export of it gives transformers our logits (skipped, saying why,
// without transformers or with PENTA_NO_TORCH=1; tests/08_expert_parallel/hf_export_test.sh checks the
// programs' --export-hf and --model DIR at ep 1, 2, 4 without PyTorch). Ranks that would write a tensor
// twice (coordinates that do not fit the layout) are refused on every rank after the writes.
// Playbook: "Expert parallelism", "5D parallelism in a nutshell" (checkpoints).
//   build/bin/tests_08 -ts='ch08 np1' -tc='Mixtral*'
//   mpirun -np 4 build/bin/tests_08 -ts='ch08 np4' -tc='Mixtral*'

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "../../08_expert_parallel/moe_layer.hpp"
#include "../../common/grid.hpp"
#include "../../common/hf_checkpoint.hpp"
#include "../../common/runtime.hpp"
#include "../../common/train_loop.hpp"
#include "../01_single_gpu/hf_testing.hpp"
#include "../01_single_gpu/torch_testing.hpp"

using namespace penta;
using namespace penta::hf_testing;
using penta::testing::contains;
using penta::testing::error_of;

namespace {

// a one-rank MoE model of config c (weights from w, else seeded) with chapter 08's layer
std::unique_ptr<Model> moe_model(const LlamaConfig& c, MoeBalance balance = MoeBalance::none,
                                 std::shared_ptr<const HfCheckpoint> w = nullptr) {
    MoeOptions o;
    o.balance = balance;
    ModelOptions mo;
    mo.mlp_core = std::make_shared<MoeLayer>(c, o, Device::cpu);
    mo.weights = std::move(w);
    return std::make_unique<Model>(c, Device::cpu, 7, mo);
}

// the same on the grid's ep group: this rank holds E/ep experts of every layer
std::unique_ptr<Model> moe_model(const LlamaConfig& c, ParallelGrid& grid, std::shared_ptr<const HfCheckpoint> w = nullptr) {
    ModelOptions mo;
    mo.mlp_core = std::make_shared<MoeLayer>(c, MoeOptions{MoeBalance::none}, Device::cpu, &grid.ep());
    mo.weights = std::move(w);
    return std::make_unique<Model>(c, Device::cpu, 7, mo);
}

// the world as dp W x ep W (W ranks): rank r holds experts [r E/W, (r+1) E/W)
ParallelGrid ep_world(const LlamaConfig& c) {
    const int W = world_size();
    return ParallelGrid(make_world_comm(CommBackend::mpi), GridShape{W, 1, 1, 1, W}, &c);
}

// a scratch path every rank agrees on (rank 0's process id)
std::string shared_scratch(Comm& world, const std::string& what) {
    return "/tmp/penta_hf_" + std::to_string((long)world.all_reduce_scalar(world.rank() ? 0 : getpid())) + "_" + what;
}

std::string file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// true on every rank when `ok` is true on every rank (a check every rank can wait on)
bool on_every_rank(Comm& world, bool ok) { return world.all_reduce_scalar(ok ? 0.0 : 1.0) == 0; }

// Exported at ep W = the world: the file is the one-rank export of the same weights, byte for byte (seeded
// weights are a function of the tensor's name and index, so one rank builds them too); reloaded at ep W, every
// rank's experts come back bit for bit.
void check_export_at_ep() {
    const LlamaConfig c = preset("tiny-moe");  // 8 experts in each of 4 layers, 2 per token
    ParallelGrid grid = ep_world(c);
    Comm& world = grid.world();
    const int W = world.size();
    CAPTURE(W);
    const std::string dir = shared_scratch(world, "ep" + std::to_string(W)), one = dir + "_ep1";
    std::unique_ptr<Model> m = moe_model(c, grid);
    const int64_t experts_here = c.n_layers * (c.moe.experts / W) * 3 * c.hidden * c.moe.expert_ffn;
    CHECK(m->n_params() == c.n_params() - c.n_layers * c.moe.experts * 3 * c.hidden * c.moe.expert_ffn + experts_here);
    export_hf(*m, dir, grid.coords(), &world);
    bool same = true;
    if (world.rank() == 0) {  // the one-rank model and its export, on rank 0 alone (its own one-rank world)
        std::string error = error_of([&] {
            std::unique_ptr<Model> a = moe_model(c);
            export_hf(*a, one, GridCoords{}, make_self_comm("one rank").get());
            const std::string got = file_bytes(dir + "/model.safetensors"), want = file_bytes(one + "/model.safetensors");
            CHECK(want.size() > (size_t)(4 * c.n_params()));
            same = got == want;
            CHECK_MESSAGE(same, "ep " << W << ": " << got.size() << " bytes, ep 1: " << want.size());
            CHECK(file_bytes(dir + "/config.json") == file_bytes(one + "/config.json"));
            SafetensorsFile f(dir + "/model.safetensors");
            CHECK(f.tensors().size() == ParamLayout::whole(c, nullptr, &a->mlp()).tensors.size());
        });
        CHECK_MESSAGE(error.empty(), error);
        same = same && error.empty();
    }
    REQUIRE(on_every_rank(world, same));
    std::unique_ptr<Model> b = moe_model(resolve_model(dir), grid, std::make_shared<HfCheckpoint>(dir));
    CHECK(b->params().to_host() == m->params().to_host());
    world.barrier();
    if (world.rank() == 0) std::filesystem::remove_all(dir), std::filesystem::remove_all(one);
}

// transformers' save_pretrained Mixtral loaded at ep W: transformers' logits and loss on its reference batch;
// exported again at ep W, transformers reads our logits back (hf_reference.py check: <= 1e-5 of the scale)
void check_transformers_at_ep() {
    HfSpec spec;
    spec.experts = 4, spec.layers = 2;
    LlamaConfig probe = preset("tiny-moe");
    probe.moe.experts = spec.experts;
    ParallelGrid grid = ep_world(probe);
    Comm& world = grid.world();
    const int W = world.size();
    CAPTURE(W);
    std::string why, py = world.rank() == 0 && !testing::python_with_torch().empty() ? python_with_hf(&why) : "";
    if (world.all_reduce_scalar(py.empty() ? 0.0 : 1.0) == 0)
        SKIP_TEST(why.empty() ? "no transformers on rank 0 (no PyTorch, or PENTA_NO_TORCH=1)" : why);
    const std::string dir = shared_scratch(world, "mixtral"), out = dir + "_ep" + std::to_string(W);
    bool made = true;
    if (world.rank() == 0) {  // rank 0 alone, the others waiting below: nothing may escape
        const std::string error = error_of([&] { made = make_hf_model(py, dir, spec); });
        CHECK_MESSAGE(error.empty(), error);
        made = made && error.empty();
    }
    REQUIRE(on_every_rank(world, made));
    const HfReference ref = read_hf_reference(dir);
    const LlamaConfig c = resolve_model(dir);
    REQUIRE(c.moe.experts == 4);
    std::unique_ptr<Model> m = moe_model(c, grid, std::make_shared<HfCheckpoint>(dir));
    const Tensor tokens = Tensor::from_host_i32(ref.tokens, {ref.B * ref.T}, Device::cpu);
    const std::vector<float> logits = m->forward_logits(tokens, ref.B, ref.T).to_host();  // (B T, V)
    check_close_scaled(logits, ref.logits, 1e-5, "save_pretrained's Mixtral at ep " + std::to_string(W));
    // the loss of the first step: mean cross-entropy over the counted targets
    const int64_t V = c.vocab;
    double loss = 0;
    for (int64_t i = 0; i < ref.B * ref.T; i++) {
        if (ref.targets[i] < 0) continue;
        const float* row = logits.data() + i * V;
        double mx = row[0], z = 0;
        for (int64_t v = 1; v < V; v++) mx = std::max(mx, (double)row[v]);
        for (int64_t v = 0; v < V; v++) z += std::exp(row[v] - mx);
        loss += mx + std::log(z) - row[ref.targets[i]];
    }
    loss /= (double)ref.counted();
    CHECK_MESSAGE(std::fabs(loss - ref.loss) <= 1e-5 * ref.loss, "ep " << W << " loss " << loss << ", transformers' " << ref.loss);
    if (world.rank() == 0)
        std::printf("save_pretrained's Mixtral at ep %d: loss %.9f, transformers' %.9f (relative difference %.1e)\n", W,
                    loss, ref.loss, std::fabs(loss - ref.loss) / ref.loss);
    export_hf(*m, out, grid.coords(), &world);
    bool agrees = true;
    if (world.rank() == 0) {
        const std::string error = error_of([&] {
            write_logits(out + "/ours.safetensors", ref.tokens, ref.B, ref.T, logits);
            agrees = transformers_agrees(py, out, out + "/ours.safetensors");
        });
        CHECK_MESSAGE(error.empty(), error);
        agrees = agrees && error.empty();
        CHECK(agrees);
    }
    CHECK(on_every_rank(world, agrees));
    world.barrier();
    if (world.rank() == 0 && !std::getenv("PENTA_KEEP")) std::filesystem::remove_all(dir), std::filesystem::remove_all(out);
}

}  // namespace

TEST_SUITE("ch08 np1") {

TEST_CASE("Mixtral export: transformers' MixtralForCausalLM loads it with our logits; pentatron reloads the same bits") {
    const LlamaConfig c = preset("tiny-moe");  // 8 experts of width 128, 2 per token, tied
    const std::string dir = scratch("export");
    std::unique_ptr<Model> a = moe_model(c);
    export_hf(*a, dir, GridCoords{}, nullptr);
    std::ifstream in(dir + "/config.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    CHECK(j["model_type"] == "mixtral");
    CHECK(j["architectures"][0] == "MixtralForCausalLM");
    CHECK((j["num_local_experts"] == 8 && j["num_experts_per_tok"] == 2 && j["intermediate_size"] == 128));
    SafetensorsFile f(dir + "/model.safetensors");
    CHECK(f.find("model.layers.3.block_sparse_moe.experts.7.w2.weight"));
    CHECK(f.find("model.layers.0.block_sparse_moe.gate.weight"));

    const LlamaConfig back = resolve_model(dir);
    CHECK((back.moe.experts == 8 && back.moe.top_k == 2 && back.moe.expert_ffn == 128));
    CHECK(back.n_params() == c.n_params());
    std::unique_ptr<Model> b = moe_model(back, MoeBalance::none, std::make_shared<HfCheckpoint>(dir));
    CHECK(b->params().to_host() == a->params().to_host());

    std::string why;
    const std::string py = python_with_hf(&why);
    if (py.empty()) {
        std::filesystem::remove_all(dir);
        SKIP_TEST(why);
    }
    const int64_t B = 2, T = 16;
    std::vector<int32_t> tokens(B * T);
    for (int64_t i = 0; i < B * T; i++) tokens[i] = (int32_t)((i * 37 + 11) % c.vocab);
    const Tensor t = Tensor::from_host_i32(tokens, {B * T}, Device::cpu);
    write_logits(dir + "/ours.safetensors", tokens, B, T, a->forward_logits(t, B, T).to_host());
    CHECK(transformers_agrees(py, dir, dir + "/ours.safetensors"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("Mixtral export: what MixtralForCausalLM has no place for is refused by name, before a file is written") {
    CHECK(contains(error_of([] { check_hf_exportable(preset("deepseek-moe-16b")); }),
                   "which has no place for: 2 shared experts (DeepSeekMoE); top-k weights that are not renormalised to "
                   "sum 1 (Mixtral renormalises); 1 dense layers before the MoE ones"));
    LlamaConfig c = preset("tiny-moe");
    CHECK(error_of([&] { check_hf_exportable(c); }) == "");
    c.moe.sigmoid_scores = true;
    CHECK(contains(error_of([&] { check_hf_exportable(c); }), "sigmoid router scores"));
    c = preset("tiny-moe"), c.head_size = 16;
    CHECK(contains(error_of([&] { check_hf_exportable(c); }), "head_dim 16 != hidden 128 / heads 4"));
    c = preset("tiny-moe"), c.rope_scaling = RopeScaling{RopeScaling::Type::llama3, 8, 1, 4, 16};
    CHECK(contains(error_of([&] { check_hf_exportable(c); }), "a llama3 rope_scaling"));

    const std::string dir = scratch("bias");
    std::unique_ptr<Model> m = moe_model(preset("tiny-moe"), MoeBalance::bias);
    CHECK(contains(error_of([&] { export_hf(*m, dir, GridCoords{}, nullptr); }),
                   "a per-expert routing bias (--moe-balance bias)"));
    CHECK(!std::filesystem::exists(dir + "/model.safetensors"));
}

}  // TEST_SUITE

TEST_SUITE("ch08 np2") {
TEST_CASE("Mixtral export at ep 2 is the one-rank export byte for byte, and reloads at ep 2 bit for bit") {
    check_export_at_ep();
}
TEST_CASE("Mixtral at ep 2: save_pretrained's folder gives transformers' logits and loss; its export, ours") {
    check_transformers_at_ep();
}
TEST_CASE("an export whose ranks write a tensor twice is refused on every rank, not left silently wrong") {
    const LlamaConfig c = preset("tiny-moe");
    ParallelGrid grid = ep_world(c);
    const std::string dir = shared_scratch(grid.world(), "twice");
    std::unique_ptr<Model> m = moe_model(c, grid);
    // both ranks claim dp coordinate 0: each writes the replicated tensors (attention, router, norms) as theirs
    const std::string e = error_of([&] { export_hf(*m, dir, GridCoords{}, &grid.world()); });
    CHECK(contains(e, "--export-hf " + dir + ": the ranks wrote "));
    CHECK(contains(e, "some tensor was written by no rank or by two"));
    grid.world().barrier();
    if (grid.world().rank() == 0) std::filesystem::remove_all(dir);
}
}  // TEST_SUITE

TEST_SUITE("ch08 np4") {
TEST_CASE("Mixtral export at ep 4 is the one-rank export byte for byte, and reloads at ep 4 bit for bit") {
    check_export_at_ep();
}
TEST_CASE("Mixtral at ep 4: save_pretrained's folder gives transformers' logits and loss; its export, ours") {
    check_transformers_at_ep();
}
}  // TEST_SUITE
