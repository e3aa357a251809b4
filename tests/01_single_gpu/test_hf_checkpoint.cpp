// test_hf_checkpoint.cpp — Hugging Face checkpoints on one rank: random LlamaForCausalLMs that transformers
// saved (tied and untied, GQA, a llama3 rope_scaling block, a head_dim of their own, bf16, one file and
// sharded) load through --model DIR's path and give transformers' logits, loss and gradients; RoPE's table
// equals transformers' bit for bit; export and reload give back the same bits; bad safetensors files and
// config keys we do not implement are refused naming the file, the key and the rule.
//   build/bin/tests_01 -ts='ch01 np1' -tc='*Hugging Face*,*safetensors*,*refused*'

#include <cstdio>
#include <cstring>
#include <fstream>

#include "../../common/hf_checkpoint.hpp"
#include "../../common/rope.hpp"
#include "../../common/train_loop.hpp"
#include "hf_testing.hpp"

using namespace penta;
using namespace penta::hf_testing;
using penta::testing::contains;
using penta::testing::error_of;

namespace {

// a model of --model dir's config and weights on the CPU
std::unique_ptr<Model> load(const std::string& dir, const ModelOptions& base = {}) {
    ModelOptions o = base;
    o.weights = std::make_shared<HfCheckpoint>(dir);
    return std::make_unique<Model>(resolve_model(dir), Device::cpu, 1, o);
}

void check_against_transformers(Model& m, const HfReference& ref, const std::string& what) {
    const int64_t B = ref.B, T = ref.T;
    Tensor tokens = Tensor::from_host_i32(ref.tokens, {B * T}, Device::cpu);
    Tensor targets = Tensor::from_host_i32(ref.targets, {B * T}, Device::cpu);
    check_close_scaled(m.forward_logits(tokens, B, T).to_host(), ref.logits, 1e-5, what + ": logits");
    m.zero_grads();
    const double loss = m.forward_backward(tokens, targets, B, T, (double)ref.counted());
    CHECK_MESSAGE(std::fabs(loss - ref.loss) <= 1e-5 * std::fabs(ref.loss),
                  what << ": loss " << loss << ", transformers' " << ref.loss);
    const std::vector<float> g = m.grads().to_host();
    for (const ParamTensor& t : m.tensors()) {
        REQUIRE_MESSAGE(ref.grads.count(t.name), what << ": transformers has no gradient of " << t.name);
        const std::vector<float> ours(g.begin() + t.offset, g.begin() + t.offset + t.numel());
        check_close_scaled(ours, ref.grads.at(t.name), 1e-5, what + ": gradient of " + t.name);
    }
}

// How a llama3 table's entries fall in its three bands, against the unscaled table: kept (short wavelengths),
// divided by the factor (long ones), strictly between (the smoothed middle band)
struct RopeBands {
    int kept = 0, divided = 0, between = 0;
};
RopeBands rope_bands(const LlamaConfig& c) {
    LlamaConfig plain = c;
    plain.rope_scaling = RopeScaling{};
    const std::vector<float> f = rope_inv_freq(c), base = rope_inv_freq(plain);
    RopeBands b;
    for (size_t i = 0; i < f.size(); i++) {
        if (f[i] == base[i]) b.kept++;
        else if (f[i] == base[i] / (float)c.rope_scaling.factor) b.divided++;
        else if (f[i] < base[i] && f[i] > base[i] / (float)c.rope_scaling.factor) b.between++;
    }
    return b;
}

// a safetensors file from a header and data bytes, as a writer that lies might write it
std::string write_raw(const std::string& path, const std::string& header, size_t data_bytes, int64_t length = -1) {
    std::ofstream f(path, std::ios::binary);
    const uint64_t n = length >= 0 ? (uint64_t)length : header.size();
    for (int i = 0; i < 8; i++) f.put((char)((n >> (8 * i)) & 0xff));
    f << header << std::string(data_bytes, '\0');
    return path;
}

uint64_t fs_size(const std::string& path) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    return (uint64_t)f.tellg();
}

}  // namespace

TEST_SUITE("ch01 np1") {

TEST_CASE("Hugging Face checkpoints: transformers' random Llamas load and give its logits, loss and gradients to 1e-5") {
    std::string why;
    const std::string py = python_with_hf(&why);
    if (py.empty()) SKIP_TEST(why);
    HfSpec untied, tied_sharded, gqa_head_dim, bf16, f16;
    tied_sharded.tied = true, tied_sharded.llama3 = true, tied_sharded.shard_kb = 20;
    gqa_head_dim.llama3 = true, gqa_head_dim.head_dim = 16, gqa_head_dim.layers = 2;
    bf16.tied = true, bf16.dtype = "bfloat16", bf16.layers = 2;
    f16.dtype = "float16", f16.layers = 2;  // F16 tensors, converted to the f32 policy as they are read
    for (const HfSpec& spec : {untied, tied_sharded, gqa_head_dim, bf16, f16}) {
        CAPTURE(spec.str());
        const std::string dir = scratch("model");
        REQUIRE(make_hf_model(py, dir, spec));
        const HfReference ref = read_hf_reference(dir);
        std::unique_ptr<Model> m = load(dir);
        const LlamaConfig& c = m->config();
        CHECK(c.n_kv_heads < c.n_heads);  // GQA
        CHECK(c.tied_embeddings == spec.tied);
        // the rotary table, bit for bit (llama3's rescaling included)
        const std::vector<float> inv = rope_inv_freq(c);
        REQUIRE(inv.size() == ref.inv_freq.size());
        CHECK_MESSAGE(std::memcmp(inv.data(), ref.inv_freq.data(), inv.size() * 4) == 0,
                      "RoPE's inverse frequencies differ from transformers' in some bit");
        if (spec.llama3) {  // hf_reference.py's block puts entries in all three bands, so all three are compared
            const RopeBands b = rope_bands(c);
            CHECK_MESSAGE((b.kept > 0 && b.divided > 0 && b.between > 0), "bands: " << b.kept << " kept, " << b.divided
                                                                               << " divided, " << b.between << " between");
        }
        check_against_transformers(*m, ref, spec.str());
        std::system(("rm -rf '" + dir + "'").c_str());
    }
}

TEST_CASE("RoPE: llama3 rope_scaling's table is transformers' ROPE_INIT_FUNCTIONS[\"llama3\"] bit for bit on "
          "Llama-3.2-1B's and Llama-3.1-8B's configs") {
    std::string why;
    const std::string py = python_with_hf(&why);
    if (py.empty()) SKIP_TEST(why);
    LlamaConfig l31 = preset("llama3-8b");  // Llama-3.1-8B: Llama-3-8B's shape, 128k positions, factor 8
    l31.name = "Llama-3.1-8B", l31.max_seq = 131072;
    l31.rope_scaling = RopeScaling{RopeScaling::Type::llama3, 8, 1, 4, 8192};
    const std::string cfg = scratch("rope_config.json"), out = scratch("rope.safetensors");
    for (const LlamaConfig& c : {preset("llama3.2-1b"), l31}) {
        CAPTURE(c.name);
        const RopeBands b = rope_bands(c);  // head dim 64: 32 entries; 128: 64 entries
        CHECK_MESSAGE((b.kept > 0 && b.divided > 0 && b.between > 0),
                      "bands: " << b.kept << " kept, " << b.divided << " divided, " << b.between << " between");
        write_hf_config(c, DType::f32, cfg);
        REQUIRE(std::system((py + " " PENTA_SOURCE_DIR "/tools/hf_reference.py rope '" + cfg + "' '" + out + "'").c_str()) == 0);
        SafetensorsFile f(out);
        const SafeTensor* t = f.find("inv_freq");
        REQUIRE((t && t->dtype == "F32"));
        const std::vector<float> ours = rope_inv_freq(c);
        REQUIRE(t->numel() == (int64_t)ours.size());
        const float* theirs = (const float*)f.data(*t);
        for (size_t i = 0; i < ours.size(); i++)  // the first entry that differs in any bit, with both values
            if (std::memcmp(&ours[i], &theirs[i], 4) != 0) {
                FAIL_CHECK(strfmt("entry %zu of %zu: ours %.9g (%a), transformers' %.9g (%a)", i, ours.size(), ours[i],
                                  ours[i], theirs[i], theirs[i]));
                break;
            }
    }
    std::remove(cfg.c_str());
    std::remove(out.c_str());
}

TEST_CASE("Hugging Face checkpoints: export then reload gives the same bits; bf16 weights and ZeRO-3-style unit fills") {
    LlamaConfig c = preset("tiny");
    c.rope_scaling = RopeScaling{RopeScaling::Type::llama3, 8, 1, 4, 16};
    const std::string dir = scratch("export");
    for (DType param : {DType::f32, DType::bf16, DType::f16}) {
        CAPTURE(dtype_name(param));
        ModelOptions o;
        o.precision.param = param;
        o.precision.fp32_master = param != DType::f32;
        Model a(c, Device::cpu, 5, o);
        export_hf(a, dir, GridCoords{}, nullptr);
        {  // the header is padded with spaces to a multiple of 8 bytes, so the data starts aligned for its dtype
            std::ifstream f(dir + "/model.safetensors", std::ios::binary);
            unsigned char len[8] = {};
            f.read((char*)len, 8);
            uint64_t n = 0;
            for (int i = 7; i >= 0; i--) n = n << 8 | len[i];
            CHECK(n % 8 == 0);
            // every tensor is 2 (bf16, f16) or 4 (f32) bytes an element: the file is the header and the numbers
            CHECK(fs_size(dir + "/model.safetensors") == 8 + n + (uint64_t)a.n_params() * dtype_size(param));
        }
        const LlamaConfig back = resolve_model(dir);
        CHECK((back.rope_scaling.type == RopeScaling::Type::llama3 && back.rope_scaling.original_max_position == 16));
        CHECK(back.n_params() == c.n_params());
        std::unique_ptr<Model> b = load(dir, o);
        CHECK(b->params().to_host() == a.params().to_host());
        // one unit's layout alone (how a ZeRO-3 shard fills itself) reads the same values
        const ParamUnit& u = a.layout().units[1];
        ParamLayout one = a.layout();
        one.tensors.clear();
        for (int t : u.tensors) {
            ParamTensor pt = a.layout().tensors[t];
            pt.offset -= u.offset;
            one.tensors.push_back(pt);
        }
        one.numel = u.numel;
        Tensor unit = Tensor::empty({u.numel}, DType::f32, Device::cpu, Tag::workspace);
        b->initial_weights(one, unit);
        const std::vector<float> all = a.params().to_host();
        CHECK(unit.to_host() == std::vector<float>(all.begin() + u.offset, all.begin() + u.offset + u.numel));
    }
    std::system(("rm -rf '" + dir + "'").c_str());
}

TEST_CASE("Hugging Face checkpoints: a large load prints its progress, then the total and the time") {
    const std::string dir = scratch("progress");
    Model a(preset("small"), Device::cpu, 5);  // 3.0M f32 parameters: 12 MB
    export_hf(a, dir, GridCoords{}, nullptr);
    const std::string log = scratch("progress.log");
    std::FILE* out = std::fopen(log.c_str(), "w");
    REQUIRE(out);
    ModelOptions o;  // a line for every tensor, as a load of 256 MB and more would print every 2 s
    o.weights = std::make_shared<HfCheckpoint>(dir, LoadProgressOptions{out, 0, 0});
    Model b(resolve_model(dir), Device::cpu, 1, o);
    std::fclose(out);
    std::ifstream in(log);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    REQUIRE(lines.size() == a.tensors().size() + 1);
    CHECK(lines.front().rfind("loading " + dir + ": ", 0) == 0);
    CHECK(lines[lines.size() - 2] == "loading " + dir + ": 100% (0.01 of 0.01 GB)");
    CHECK(lines.back().rfind("loading " + dir + ": done, 0.01 GB in ", 0) == 0);
    CHECK(b.params().to_host() == a.params().to_host());
    out = std::fopen(log.c_str(), "w");  // the default threshold: a 12 MB load says nothing
    o.weights = std::make_shared<HfCheckpoint>(dir, LoadProgressOptions{out});
    Model quiet(resolve_model(dir), Device::cpu, 1, o);
    CHECK(std::ftell(out) == 0);
    std::fclose(out);
    std::remove(log.c_str());
    std::system(("rm -rf '" + dir + "'").c_str());
}

TEST_CASE("Hugging Face checkpoints: a missing, misshapen or unknown tensor is refused naming it") {
    const LlamaConfig c = preset("tiny");
    const std::string dir = scratch("bad");
    Model a(c, Device::cpu, 5);
    export_hf(a, dir, GridCoords{}, nullptr);
    // rewrite model.safetensors with one tensor changed
    auto rewrite = [&](const std::string& drop, const std::string& add, const Shape& add_shape) {
        std::vector<SafetensorsEntry> entries;
        for (const ParamTensor& t : a.tensors())
            if (t.name != drop) entries.push_back({t.name, DType::f32, t.full_shape});
        if (!add.empty()) entries.push_back({add, DType::f32, add_shape});
        const SafetensorsPlan plan = plan_safetensors(entries, {{"format", "pt"}});
        std::ofstream f(dir + "/model.safetensors", std::ios::binary);
        f << plan.header << std::string(plan.file_bytes - plan.header.size(), '\0');
    };
    rewrite("model.layers.1.mlp.up_proj.weight", "", {});
    CHECK(contains(error_of([&] { load(dir); }), "tensor 'model.layers.1.mlp.up_proj.weight' (64, 32) is missing"));
    rewrite("model.norm.weight", "model.norm.weight", {31});
    CHECK(contains(error_of([&] { load(dir); }), "tensor 'model.norm.weight' has shape (31), the config implies (32)"));
    rewrite("", "model.layers.0.self_attn.q_proj.bias", {32});
    CHECK(contains(error_of([&] { load(dir); }), "tensor 'model.layers.0.self_attn.q_proj.bias' is not part of"));
    std::remove((dir + "/model.safetensors").c_str());
    CHECK(contains(error_of([&] { load(dir); }), "neither model.safetensors nor model.safetensors.index.json"));
    std::ofstream(dir + "/model.safetensors.index.json") << R"({"weight_map": {"model.norm.weight": "model-1.safetensors"}})";
    rewrite("", "", {});
    std::rename((dir + "/model.safetensors").c_str(), (dir + "/model-1.safetensors").c_str());
    std::ofstream(dir + "/model.safetensors.index.json") << R"({"weight_map": {"model.norm.weight": "model-1.safetensors",
        "lm_head.weight": "model-2.safetensors"}})";
    CHECK(contains(error_of([&] { load(dir); }), "model-2.safetensors"));
    std::system(("rm -rf '" + dir + "'").c_str());
}

TEST_CASE("safetensors: a truncated or lying header is refused naming the file and the rule") {
    const std::string p = scratch("st.safetensors");
    const std::string ok = R"({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}, "__metadata__": {"format": "pt"}})";
    SafetensorsFile good(write_raw(p, ok, 16));
    REQUIRE(good.find("a"));
    CHECK(good.find("a")->shape == Shape{2, 2});
    CHECK(good.metadata().at("format") == "pt");
    // two bytes an element for F16 and BF16, one for F8, eight for F64
    for (auto [dt, size] : {std::pair<const char*, int>{"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F64", 8}, {"I32", 4}}) {
        CAPTURE(dt);
        const std::string h = strfmt(R"({"a": {"dtype": "%s", "shape": [3, 1], "data_offsets": [0, %d]}})", dt, 3 * size);
        SafetensorsFile f(write_raw(p, h, 3 * size));
        REQUIRE(f.find("a"));
        CHECK(safetensors_dtype_size(f.find("a")->dtype) == (size_t)size);
    }
    auto err = [&](const std::string& header, size_t data, int64_t length = -1) {
        return error_of([&] { SafetensorsFile f(write_raw(p, header, data, length)); });
    };
    CHECK(contains(err(ok, 10), "run past the 10 bytes of data the file has (truncated?)"));
    CHECK(contains(err(ok, 16, 1 << 20), "header length 1048576 runs past the end of the file"));
    CHECK(contains(err("{\"a\": ", 0), "the header is not valid JSON"));
    CHECK(contains(err("[1, 2]", 0), "the header must be a JSON object"));
    CHECK(contains(err(R"({"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}})", 4),
                   "dtype \"F33\" is not a safetensors dtype"));
    CHECK(contains(err(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8),
                   "shape (3) of F32 is 12 bytes, but data_offsets [0, 8] hold 8"));
    CHECK(contains(err(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4), "sizes >= 0"));
    CHECK(contains(err(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4]}})", 4), "must be [BEGIN, END]"));
    CHECK(contains(err(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8), "end before they begin"));
    CHECK(contains(err(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12), "overlap"));
    CHECK(contains(err(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                          "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})", 12), "belong to no tensor"));
    CHECK(contains(err(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 6), "trailing bytes"));
    CHECK(contains(err(R"({"a": {"dtype": "F32", "shape": [1]}})", 4), "needs dtype, shape and data_offsets"));
    CHECK(contains(err(R"({"__metadata__": {"format": 1}})", 0), "__metadata__ \"format\" must be a string"));
    std::ofstream(p) << "abc";
    CHECK(contains(error_of([&] { SafetensorsFile f(p); }), "shorter than the 8-byte header length"));
    std::remove(p.c_str());
}

TEST_CASE("model config: keys of models we do not build are refused naming the key and the value; what transformers "
          "builds the same model from is read") {
    const std::string path = scratch("config.json");
    const std::string base = R"("hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 64, "vocab_size": 64, "max_position_embeddings": 32)";
    auto err = [&](const std::string& extra) {
        std::ofstream(path) << "{" << base << ", " << extra << "}";
        return error_of([&] { load_hf_config(path); });
    };
    CHECK(err(R"("attention_bias": false, "mlp_bias": false, "hidden_act": "silu", "attention_dropout": 0.0,
                 "rope_scaling": null, "sliding_window": null)") == "");
    CHECK(contains(err(R"("attention_bias": true)"), "attention_bias = true is not implemented"));
    CHECK(contains(err(R"("mlp_bias": true)"), "mlp_bias = true is not implemented"));
    CHECK(contains(err(R"("hidden_act": "gelu")"), "hidden_act = \"gelu\" is not implemented"));
    CHECK(err(R"("hidden_act": "swish")") == "");  // transformers' ACT2FN: the same nn.SiLU as "silu"
    CHECK(contains(err(R"("attention_dropout": 0.1)"), "attention_dropout = 0.1 is not implemented"));
    // transformers' Llama has no sliding window and ignores the key: so do we (a Mixtral's window is kept and the
    // run's sequences held to it: tests/08_expert_parallel/test_moe_config.cpp, bad_inputs_test.sh)
    CHECK(err(R"("sliding_window": 4096)") == "");
    CHECK(load_hf_config(path).sliding_window == 0);
    CHECK(err(R"("sliding_window": 8)") == "");
    CHECK(load_hf_config(path).sliding_window == 0);
    CHECK(contains(err(R"("rope_scaling": {"rope_type": "linear", "factor": 2.0})"),
                   "rope_scaling rope_type = \"linear\" is not implemented"));
    CHECK(contains(err(R"("rope_scaling": {"type": "dynamic", "factor": 2.0})"),
                   "rope_scaling type = \"dynamic\" is not implemented"));
    CHECK(contains(err(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})"), "needs the number \"low_freq_factor\""));
    CHECK(contains(err(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                          "high_freq_factor": 1.0, "original_max_position_embeddings": 8192})"),
                   "low_freq_factor 4 < high_freq_factor 1"));
    CHECK(contains(err(R"("head_dim": 7)"), "head_dim 7 must be even"));
    std::ofstream(path) << "{" << base << R"(, "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})";
    const LlamaConfig c = load_hf_config(path);
    CHECK((c.rope_scaling.type == RopeScaling::Type::llama3 && c.rope_scaling.factor == 32 &&
           c.rope_scaling.original_max_position == 8192));
    std::remove(path.c_str());
}

}  // TEST_SUITE
