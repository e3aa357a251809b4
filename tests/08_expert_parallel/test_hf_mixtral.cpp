// test_hf_mixtral.cpp — chapter 08's mixture of experts out to Hugging Face and back: --export-hf writes a
// Mixtral (model_type "mixtral", its expert keys, block_sparse_moe tensor names) that transformers'
// MixtralForCausalLM loads with our logits, and that pentatron reloads bit for bit; what Mixtral has no place
// for (shared experts, sigmoid scores, dense layers first, a routing bias, ...) is refused by name before a
// file is written.
// Playbook: "Expert parallelism", "5D parallelism in a nutshell" (checkpoints).
//   build/bin/tests_08 -ts='ch08 np1' -tc='Mixtral*'

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../08_expert_parallel/moe_layer.hpp"
#include "../../common/hf_checkpoint.hpp"
#include "../../common/train_loop.hpp"
#include "../01_single_gpu/hf_testing.hpp"

using namespace penta;
using namespace penta::hf_testing;
using penta::testing::contains;
using penta::testing::error_of;

namespace {

// a one-rank MoE model of config c (weights from w, else seeded) with chapter 08's layer
std::unique_ptr<Model> moe_model(const LlamaConfig& c, MoeBalance balance = MoeBalance::none,
                                 std::shared_ptr<const WeightSource> w = nullptr) {
    MoeOptions o;
    o.balance = balance;
    ModelOptions mo;
    mo.mlp_core = std::make_shared<MoeLayer>(c, o, Device::cpu);
    mo.weights = std::move(w);
    return std::make_unique<Model>(c, Device::cpu, 7, mo);
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
