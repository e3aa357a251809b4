// test_moe_config.cpp — chapter 08, the MoE models: the presets' parameter counts (total and active per
// token) equal the published ones, the layout of the MoE layer holds exactly them (and E/ep experts per ep
// rank), a Mixtral config.json is read (and what this layer does not model is refused), and the MoE shape is
// validated.
// Playbook: "Expert parallelism". Run: `make test CH=08`, or `build/bin/tests_08 -ts='ch08 np1' -tc='*preset*'`.
#include <unistd.h>

#include <cmath>
#include <fstream>

#include "../../08_expert_parallel/moe_layer.hpp"
#include "../../common/formulas.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {
// what a MoE layer asks of its ep group when it is declared: a rank and a size (no communication)
class RankOf : public Comm {
   public:
    RankOf(int rank, int size) { rank_ = rank, size_ = size, name_ = "ep"; }
    CommBackend backend() const override { return CommBackend::mpi; }
    CommHandle all_reduce_async(Tensor&, ReduceOp) override { return none(); }
    CommHandle reduce_scatter_async(const Tensor&, Tensor&) override { return none(); }
    CommHandle all_gather_async(const Tensor&, Tensor&) override { return none(); }
    CommHandle broadcast_async(Tensor&, int) override { return none(); }
    CommHandle send_async(const Tensor&, int, int) override { return none(); }
    CommHandle recv_async(Tensor&, int, int) override { return none(); }
    CommHandle all_to_all_v_async(const Tensor&, const std::vector<int64_t>&, const std::vector<int64_t>&, Tensor&,
                                  const std::vector<int64_t>&, const std::vector<int64_t>&) override {
        return none();
    }
    void barrier() override { none(); }
    double reduce_scalar(double, ReduceOp) override { return none(), 0.0; }
    std::unique_ptr<Comm> split(int, int, const std::string&) override { return none(), nullptr; }

   private:
    CommHandle none() { throw Error("RankOf: a stand-in group does not communicate"); }
};

// x rounded to 0.1 billion, the way model cards give their sizes ("46.7B")
double billions(int64_t x) { return std::round((double)x / 1e8) / 10; }

std::string write_config(const std::string& text) {
    const std::string path = "/tmp/penta_moe_config_" + std::to_string(getpid()) + ".json";
    std::ofstream(path) << text;
    return path;
}
}  // namespace

TEST_SUITE("ch08 np1") {

TEST_CASE("MoE presets: parameter counts equal the published ones, total and active per token") {
    // Mixtral-8x7B: "46.7B total parameters but only uses 12.9B parameters per token" (Mistral AI)
    const LlamaConfig mixtral = preset("mixtral-8x7b");
    CHECK(mixtral.n_params() == 46702792704);
    CHECK(mixtral.n_active_params() == 12879925248);
    CHECK(billions(mixtral.n_params()) == 46.7);
    CHECK(billions(mixtral.n_active_params()) == 12.9);
    // DeepSeekMoE 16B: "16.4B total, 2.8B activated" (Dai et al. 2024): 64 experts of 1408, 6 per token, 2 shared,
    // layer 0 dense (10944 wide)
    const LlamaConfig ds = preset("deepseek-moe-16b");
    CHECK(ds.n_params() == 16375728128);
    CHECK(ds.n_active_params() == 2828650496);
    CHECK(billions(ds.n_params()) == 16.4);
    CHECK(billions(ds.n_active_params()) == 2.8);
    // a dense model's active parameters are all of them
    CHECK(preset("tiny").n_active_params() == preset("tiny").n_params());
    const std::vector<std::string> names = preset_names();
    for (const char* n : {"tiny-moe", "mixtral-8x7b", "deepseek-moe-16b"})
        CHECK(std::find(names.begin(), names.end(), n) != names.end());
}

TEST_CASE("MoE layout: the layer's tensors are the count's, by their Hugging Face names; ep ranks hold E/ep experts") {
    for (const char* name : {"tiny-moe"}) {
        LlamaConfig c = preset(name);
        for (bool deepseek : {false, true}) {
            if (deepseek) c.moe.shared_experts = 2, c.moe.first_dense = 1, c.moe.naming = MoeNaming::deepseek;
            INFO(name << (deepseek ? " deepseek-style" : ""));
            MoeOptions o;
            MoeLayer one(c, o, Device::cpu);
            const ParamLayout L = ParamLayout::build(c, LayoutOptions{}, nullptr, &one);
            CHECK(L.numel == c.n_params());
            const char* router = deepseek ? "model.layers.1.mlp.gate.weight" : "model.layers.0.block_sparse_moe.gate.weight";
            CHECK(L.find(router).shape == Shape{c.moe.experts, c.hidden});
            CHECK(L.find(deepseek ? "model.layers.1.mlp.experts.7.down_proj.weight"
                                  : "model.layers.0.block_sparse_moe.experts.7.w2.weight").shape ==
                  Shape{c.hidden, c.moe.expert_ffn});
            if (deepseek) {
                CHECK(L.find("model.layers.0.mlp.up_proj.weight").shape == Shape{c.ffn, c.hidden});  // the dense layer
                CHECK(L.find("model.layers.1.mlp.shared_experts.gate_proj.weight").shape ==
                      Shape{2 * c.moe.expert_ffn, c.hidden});
            }
            // on 4 ep ranks, rank 1 holds experts 2 and 3 of every MoE layer, in a unit of its own
            RankOf ep(1, 4);
            MoeLayer second(c, o, Device::cpu, &ep);
            // playbook: 000.09.5 — each expert stays whole; an ep rank holds E/ep of them
            CHECK(second.first_expert() == 2);
            const ParamLayout L1 = ParamLayout::build(c, LayoutOptions{}, nullptr, &second);
            const int64_t experts = c.n_layers - c.moe.first_dense;
            CHECK(L.numel - L1.numel == experts * (c.moe.experts - 2) * 3 * c.hidden * c.moe.expert_ffn);
            const int64_t layer = c.moe.first_dense;
            const ParamUnit& unit = L1.units[L1.layer_units[layer][1]];
            REQUIRE(unit.tensors.size() == 6);
            CHECK(L1.tensors[unit.tensors.front()].name ==
                  strfmt("model.layers.%ld.%s.experts.2.%s", (long)layer, deepseek ? "mlp" : "block_sparse_moe",
                         deepseek ? "gate_proj.weight" : "w1.weight"));
            CHECK(L1.tensors[unit.tensors.back()].name ==
                  strfmt("model.layers.%ld.%s.experts.3.%s", (long)layer, deepseek ? "mlp" : "block_sparse_moe",
                         deepseek ? "down_proj.weight" : "w2.weight"));
            CHECK((L1.tensors[unit.tensors[0]].sharded_on & kAxisEP));
            CHECK(!(L1.find(router).sharded_on & kAxisEP));  // the router is replicated over ep
            // the whole model from the same rank's core (what a Hugging Face folder is checked and exported
            // as): every expert, the tensors of one rank's layout, in its order
            const ParamLayout W1 = ParamLayout::whole(c, nullptr, &second);
            REQUIRE(W1.tensors.size() == L.tensors.size());
            for (size_t i = 0; i < L.tensors.size(); i++)
                CHECK((W1.tensors[i].name == L.tensors[i].name && W1.tensors[i].offset == L.tensors[i].offset &&
                       W1.tensors[i].full_shape == L.tensors[i].full_shape));
        }
    }
}

TEST_CASE("a Mixtral config.json is read, its sliding window kept; qwen2_moe and router noise are refused by name") {
    const std::string base = R"("hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": false)";
    std::string p = write_config(R"({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2,
        "router_aux_loss_coef": 0.02, "sliding_window": null, )" + base + "}");
    const LlamaConfig c = load_hf_config(p);
    CHECK(c.moe.experts == 8);
    CHECK(c.moe.top_k == 2);
    CHECK(c.moe.expert_ffn == 14336);
    CHECK(c.n_params() == preset("mixtral-8x7b").n_params());
    p = write_config(R"({"model_type": "mixtral", "num_experts_per_tok": 2, )" + base + "}");
    CHECK(contains(error_of([&] { load_hf_config(p); }), "missing key \"num_local_experts\""));
    p = write_config(R"({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 9, )" + base + "}");
    CHECK(contains(error_of([&] { load_hf_config(p); }), "top_k 9 must be in [1, experts 8]"));
    p = write_config(R"({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2,
        "sliding_window": 4096, )" + base + "}");
    CHECK(load_hf_config(p).sliding_window == 4096);  // the run's sequences are held to it (resolve_model)
    for (const char* bad : {"0", "8.5"}) {
        p = write_config(std::string(R"({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2,
            "sliding_window": )") + bad + ", " + base + "}");
        CHECK(contains(error_of([&] { load_hf_config(p); }),
                       std::string("sliding_window = ") + bad + " must be a number of tokens >= 1 or null"));
    }
    p = write_config(R"({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2,
        "router_jitter_noise": 0.1, )" + base + "}");
    CHECK(contains(error_of([&] { load_hf_config(p); }), "router_jitter_noise"));
    p = write_config(R"({"model_type": "qwen2_moe", "num_experts": 60, )" + base + "}");
    CHECK(contains(error_of([&] { load_hf_config(p); }), "q/k/v biases"));
    p = write_config(R"({"model_type": "gpt2", )" + base + "}");
    CHECK(contains(error_of([&] { load_hf_config(p); }), "model_type gpt2 is not \"llama\" or \"mixtral\""));
    std::remove(p.c_str());
}

TEST_CASE("MoE shape rules name the field") {
    LlamaConfig c = preset("tiny-moe");
    c.moe.top_k = 0;
    CHECK(contains(error_of([&] { c.validate(); }), "top_k 0 must be in [1, experts 8]"));
    c = preset("tiny-moe");
    c.moe.first_dense = c.n_layers;
    CHECK(contains(error_of([&] { c.validate(); }), "first_dense 4 must be in [0, n_layers 4)"));
    c = preset("tiny");
    c.moe.top_k = 2;
    CHECK(contains(error_of([&] { c.validate(); }), "a dense model has no top_k"));
}

}  // TEST_SUITE
