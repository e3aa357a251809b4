// hf_checkpoint.cpp — loading a Hugging Face Llama folder into any layout, exporting one from any layout
// (hf_checkpoint.hpp).
// Test: `build/bin/tests_01 -ts='ch01 np1' -tc='*Hugging Face*'`, `mpirun -np 2 build/bin/tests_04 -ts='ch04 np2'`.
#include "hf_checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime.hpp"

namespace penta {

namespace fs = std::filesystem;

bool is_hf_model_dir(const std::string& path) {
    std::error_code ec;
    return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

namespace {

nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path);
    if (!in) FAIL("cannot open '%s': %s", path.c_str(), std::strerror(errno));
    try {
        return nlohmann::json::parse(in);
    } catch (const std::exception& e) {
        FAIL("%s: not valid JSON: %s", path.c_str(), e.what());
    }
}

// n elements of a safetensors dtype (F32, BF16 or F16: checked when the file is opened) -> f32
void to_f32(const std::string& dtype, const uint8_t* src, int64_t n, float* dst) {
    dtype_to_f32(src, dtype == "F32" ? DType::f32 : dtype == "BF16" ? DType::bf16 : DType::f16, dst, n);
}

// Prints "loading DIR: 41% (1.20 of 2.94 GB)" on rank 0 while a large load runs (LoadProgressOptions).
class Progress {
   public:
    Progress(const std::string& what, double total, const LoadProgressOptions& o) : what_(what), total_(total), o_(o) {}
    void add(double bytes) {
        done_ += bytes;
        if (!shown()) return;
        const double t = seconds();
        if (t - last_ < o_.every_seconds) return;
        last_ = t;
        std::fprintf(o_.out, "%s: %.0f%% (%.2f of %.2f GB)\n", what_.c_str(), 100.0 * done_ / total_, done_ / 1e9,
                     total_ / 1e9);
        std::fflush(o_.out);
    }
    void finish() const {
        if (shown()) std::fprintf(o_.out, "%s: done, %.2f GB in %.1f s\n", what_.c_str(), total_ / 1e9, seconds());
    }

   private:
    bool shown() const { return world_rank() == 0 && total_ >= o_.from_bytes && o_.out; }
    double seconds() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
    std::string what_;
    double total_, done_ = 0, last_ = 0;
    LoadProgressOptions o_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

HfCheckpoint::HfCheckpoint(const std::string& dir, const LoadProgressOptions& progress) : dir_(dir), progress_(progress) {
    const fs::path d(dir), single = d / "model.safetensors", index = d / "model.safetensors.index.json";
    std::error_code ec;
    std::vector<std::string> names;  // of the files, in the index's order
    std::map<std::string, std::string> index_map;  // tensor -> file, from the index
    if (fs::exists(index, ec)) {
        const nlohmann::json j = read_json(index.string());
        if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
            FAIL("%s: needs a \"weight_map\" object (tensor name -> file)", index.c_str());
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it.value().is_string()) FAIL("%s: weight_map[\"%s\"] must be a file name", index.c_str(), it.key().c_str());
            const std::string f = it.value().get<std::string>();
            if (f.find('/') != std::string::npos) FAIL("%s: weight_map file '%s' must be a name in the folder", index.c_str(), f.c_str());
            index_map[it.key()] = f;
            if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
        }
    } else if (fs::exists(single, ec)) {
        names.push_back("model.safetensors");
    } else {
        FAIL("--model %s: the folder has a config.json but neither model.safetensors nor model.safetensors.index.json "
             "(to train from --seed instead, give the config file: --model %s/config.json)", dir.c_str(), dir.c_str());
    }
    for (const std::string& f : names) {
        files_.push_back(std::make_unique<SafetensorsFile>((d / f).string()));
        const SafetensorsFile& file = *files_.back();
        for (const SafeTensor& t : file.tensors()) {
            auto listed = index_map.find(t.name);
            if (!index_map.empty() && (listed == index_map.end() || listed->second != f)) continue;  // the index decides
            if (sources_.count(t.name))
                FAIL("%s: tensor '%s' is also in %s", file.path().c_str(), t.name.c_str(),
                     sources_[t.name].file->path().c_str());
            sources_[t.name] = Source{&file, &t};
        }
    }
    for (const auto& [name, f] : index_map)
        if (!sources_.count(name))
            FAIL("%s: the index puts tensor '%s' in %s, which does not hold it", index.c_str(), name.c_str(), f.c_str());

}

void HfCheckpoint::check(const ParamLayout& full) const {
    const std::string& dir = dir_;
    std::set<std::string> wanted;
    for (const ParamTensor& t : full.tensors) {
        wanted.insert(t.name);
        auto it = sources_.find(t.name);
        if (it == sources_.end())
            FAIL("--model %s: tensor '%s' %s is missing from the checkpoint (the config says %zu layers, %s)",
                 dir.c_str(), t.name.c_str(), shape_str(t.full_shape).c_str(), full.layer_units.size(),
                 wanted.count("lm_head.weight") || t.name == "lm_head.weight" ? "untied embeddings" : "tied embeddings");
        const SafeTensor& s = *it->second.tensor;
        if (s.shape != t.full_shape)
            FAIL("%s: tensor '%s' has shape %s, the config implies %s", it->second.file->path().c_str(), t.name.c_str(),
                 shape_str(s.shape).c_str(), shape_str(t.full_shape).c_str());
        if (s.dtype != "F32" && s.dtype != "BF16" && s.dtype != "F16")
            FAIL("%s: tensor '%s' is %s; weights are read from F32, BF16 or F16", it->second.file->path().c_str(),
                 t.name.c_str(), s.dtype.c_str());
    }
    for (const auto& [name, src] : sources_) {
        if (wanted.count(name)) continue;
        const bool tied_copy = name == "lm_head.weight";  // not wanted: the config ties it to the embedding
        const bool rotary = name.size() > 19 && name.compare(name.size() - 19, 19, "rotary_emb.inv_freq") == 0;
        if (!tied_copy && !rotary)
            FAIL("%s: tensor '%s' is not part of the model its config.json describes (a bias, or another architecture?)",
                 src.file->path().c_str(), name.c_str());
    }
}

const HfCheckpoint::Source& HfCheckpoint::source(const std::string& name) const {
    auto it = sources_.find(name);
    CHECK(it != sources_.end(), "--model %s: the checkpoint has no tensor '%s'", dir_.c_str(), name.c_str());
    return it->second;
}

void HfCheckpoint::fill(const ParamLayout& layout, Tensor& flat) const {
    CHECK(flat.numel() == layout.numel, "HfCheckpoint::fill: flat buffer has %lld elements, layout %lld",
          (long long)flat.numel(), (long long)layout.numel);
    Tensor host = flat.device() == Device::cpu && flat.dtype == DType::f32
                      ? flat
                      : Tensor::empty({layout.numel}, DType::f32, Device::cpu, Tag::workspace);
    double total = 0;
    for (const ParamTensor& t : layout.tensors) total += (double)t.numel() * safetensors_dtype_size(source(t.name).tensor->dtype);
    Progress progress("loading " + dir_, total, progress_);
    float* out = host.ptr<float>();
    for (const ParamTensor& t : layout.tensors) {
        const Source& src = source(t.name);
        const size_t es = safetensors_dtype_size(src.tensor->dtype);
        // this rank's block (rows, cols) at (row0, col0) of the full (R, C) tensor; a 1-D tensor is (R, 1)
        const int64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
        const int64_t R = t.full_shape[0], C = t.full_shape.size() == 2 ? t.full_shape[1] : 1;
        const int64_t valid = std::min(rows, std::max<int64_t>(0, R - t.row0));  // vocab padding rows stay 0
        float* dst = out + t.offset;
        const uint8_t* base = src.file->data(*src.tensor);
        if (cols == C) {  // whole rows: one contiguous block
            to_f32(src.tensor->dtype, base + (size_t)(t.row0 * C) * es, valid * C, dst);
        } else {
            for (int64_t r = 0; r < valid; r++)
                to_f32(src.tensor->dtype, base + (size_t)((t.row0 + r) * C + t.col0) * es, cols, dst + r * cols);
        }
        std::fill(dst + valid * cols, dst + rows * cols, 0.0f);
        // a NaN or inf weight is the file's fault: named here, not found later as a non-finite loss or gradient
        for (int64_t i = 0; i < valid * cols; i++)
            if (!std::isfinite(dst[i]))
                FAIL("%s: tensor %s holds a non-finite weight, %g at %s: the file is damaged or was saved from a "
                     "diverged run", src.file->path().c_str(), t.name.c_str(), dst[i],
                     (t.full_shape.size() == 2 ? strfmt("[%lld, %lld]", (long long)(t.row0 + i / cols),
                                                        (long long)(t.col0 + i % cols))
                                               : strfmt("[%lld]", (long long)(t.row0 + i))).c_str());
        progress.add((double)t.numel() * es);
    }
    store_params(host, flat);
    progress.finish();
}

void check_hf_exportable(const LlamaConfig& c) {
    if (!c.moe.enabled()) return;
    const MoeConfig& m = c.moe;
    std::vector<std::string> gaps;  // what transformers' MixtralForCausalLM (4.4x) computes otherwise
    if (m.shared_experts > 0) gaps.push_back(strfmt("%ld shared experts (DeepSeekMoE)", (long)m.shared_experts));
    if (m.sigmoid_scores) gaps.push_back("sigmoid router scores (DeepSeek-V3; Mixtral's are a softmax)");
    if (!m.norm_topk) gaps.push_back("top-k weights that are not renormalised to sum 1 (Mixtral renormalises)");
    if (m.first_dense > 0) gaps.push_back(strfmt("%ld dense layers before the MoE ones (every Mixtral layer is one)",
                                                 (long)m.first_dense));
    if (m.naming != MoeNaming::mixtral) gaps.push_back(strfmt("%s tensor names", moe_naming_name(m.naming)));
    if (c.head_dim() * c.n_heads != c.hidden)
        gaps.push_back(strfmt("head_dim %ld != hidden %ld / heads %ld (Mixtral derives it)", (long)c.head_dim(),
                              (long)c.hidden, (long)c.n_heads));
    if (c.rope_scaling.type != RopeScaling::Type::none) gaps.push_back("a llama3 rope_scaling (Mixtral's RoPE has none)");
    std::string all;
    for (const std::string& g : gaps) all += (all.empty() ? "" : "; ") + g;
    CHECK(gaps.empty(), "--export-hf: model %s is a mixture of experts, exported as transformers' MixtralForCausalLM, "
          "which has no place for: %s", c.name.c_str(), all.c_str());
}

void write_hf_config(const LlamaConfig& c, DType dtype, const std::string& path) {
    nlohmann::json j = {
        {"architectures", {"LlamaForCausalLM"}},
        {"model_type", "llama"},
        {"vocab_size", c.vocab},
        {"hidden_size", c.hidden},
        {"intermediate_size", c.ffn},
        {"num_hidden_layers", c.n_layers},
        {"num_attention_heads", c.n_heads},
        {"num_key_value_heads", c.n_kv_heads},
        {"head_dim", c.head_dim()},
        {"max_position_embeddings", c.max_seq},
        {"rope_theta", c.rope_theta},
        {"rms_norm_eps", c.norm_eps},
        {"tie_word_embeddings", c.tied_embeddings},
        {"hidden_act", "silu"},
        {"attention_bias", false},
        {"mlp_bias", false},
        {"attention_dropout", 0.0},
        {"torch_dtype", dtype == DType::bf16 ? "bfloat16" : dtype == DType::f16 ? "float16" : "float32"},
    };
    if (c.rope_scaling.type == RopeScaling::Type::llama3) {
        const RopeScaling& r = c.rope_scaling;
        j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", r.factor}, {"low_freq_factor", r.low_freq_factor},
                             {"high_freq_factor", r.high_freq_factor},
                             {"original_max_position_embeddings", r.original_max_position}};
    } else {
        j["rope_scaling"] = nullptr;
    }
    if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;  // as loaded (Llama ignores it, Mixtral not)
    if (c.moe.enabled()) {  // Mixtral: every layer's MLP is E experts of intermediate_size, k per token
        j["architectures"] = {"MixtralForCausalLM"};
        j["model_type"] = "mixtral";
        j["intermediate_size"] = c.moe.expert_ffn;
        j["num_local_experts"] = c.moe.experts;
        j["num_experts_per_tok"] = c.moe.top_k;
        j["router_jitter_noise"] = 0.0;
        j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
        j.erase("head_dim");  // Mixtral's attention derives it (check_hf_exportable)
    }
    std::ofstream out(path);
    CHECK(out, "cannot write '%s': %s", path.c_str(), std::strerror(errno));
    out << j.dump(2) << "\n";
    CHECK(out.good(), "writing '%s' failed", path.c_str());
}

namespace {

void write_at(int fd, const std::string& path, const void* data, size_t bytes, uint64_t offset) {
    const char* p = (const char*)data;
    while (bytes > 0) {
        const ssize_t n = ::pwrite(fd, p, bytes, (off_t)offset);
        CHECK(n > 0, "writing %zu bytes at offset %llu of '%s' failed: %s", bytes, (unsigned long long)offset,
              path.c_str(), std::strerror(errno));
        p += n, bytes -= (size_t)n, offset += (uint64_t)n;
    }
}

void barrier(Comm* world) {
    if (world) world->barrier();
}

}  // namespace

uint64_t export_hf(Model& model, const std::string& dir, const GridCoords& coords, Comm* world,
                   const std::string& source_dir) {
    CHECK(world || world_size() == 1, "export_hf on %d ranks needs the world communicator", world_size());
    const LlamaConfig& c = model.config();
    check_hf_exportable(c);  // before any file is written
    const std::string lost = model.mlp().hf_export_gap();
    CHECK(lost.empty(), "--export-hf: model %s has %s, which transformers' %s has no place for", c.name.c_str(),
          lost.c_str(), c.moe.enabled() ? "MixtralForCausalLM" : "LlamaForCausalLM");
    const DType dtype = model.precision().param;
    const ParamLayout full = ParamLayout::whole(c, &model.attention(), &model.mlp());  // every expert too
    std::vector<SafetensorsEntry> entries;
    std::map<std::string, size_t> entry_of;
    for (const ParamTensor& t : full.tensors) {
        entry_of[t.name] = entries.size();
        entries.push_back({t.name, dtype, t.full_shape});
    }
    const SafetensorsPlan plan = plan_safetensors(entries, {{"format", "pt"}});
    const std::string path = (fs::path(dir) / "model.safetensors").string();
    if (world_rank() == 0) {  // the header and the size; every rank then fills in its parts
        std::error_code ec;
        fs::create_directories(dir, ec);
        CHECK(!ec, "--export-hf %s: cannot create the directory: %s", dir.c_str(), ec.message().c_str());
        const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        CHECK(fd >= 0, "--export-hf: cannot create '%s': %s", path.c_str(), std::strerror(errno));
        write_at(fd, path, plan.header.data(), plan.header.size(), 0);
        CHECK(::ftruncate(fd, (off_t)plan.file_bytes) == 0, "cannot size '%s' to %llu bytes: %s", path.c_str(),
              (unsigned long long)plan.file_bytes, std::strerror(errno));
        ::close(fd);
    }
    barrier(world);
    const int fd = ::open(path.c_str(), O_WRONLY);
    CHECK(fd >= 0, "--export-hf: rank %d cannot open '%s' (do the ranks share this file system?): %s", world_rank(),
          path.c_str(), std::strerror(errno));
    const ParamLayout& L = model.layout();
    const size_t es = dtype_size(dtype);
    std::vector<uint8_t> bytes;
    int64_t written = 0;  // elements this rank wrote: over the world, every element of the file once
    for (int u = 0; u < (int)L.units.size(); u++) {
        if (L.units[u].numel == 0) continue;
        const std::vector<float> w = model.unit_weights(u).to_host();  // ZeRO-3: gathered over dp
        for (int ti : L.units[u].tensors) {
            const ParamTensor& t = L.tensors[ti];
            if (!counts_in_grad_norm(t, coords)) continue;  // another rank writes these values
            const int64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
            const int64_t C = t.full_shape.size() == 2 ? t.full_shape[1] : 1;
            const int64_t valid = std::min(rows, std::max<int64_t>(0, t.full_shape[0] - t.row0));
            bytes.resize((size_t)(valid * cols) * es);
            f32_to_dtype(w.data() + (t.offset - L.units[u].offset), bytes.data(), dtype, valid * cols);
            const auto entry = entry_of.find(t.name);
            CHECK(entry != entry_of.end(), "--export-hf: rank %d holds tensor %s, which the whole model's list (the "
                  "file's header) has not", world_rank(), t.name.c_str());
            const uint64_t at = plan.offsets[entry->second];
            written += valid * cols;
            if (cols == C)
                write_at(fd, path, bytes.data(), bytes.size(), at + (uint64_t)(t.row0 * C) * es);
            else
                for (int64_t r = 0; r < valid; r++)
                    write_at(fd, path, bytes.data() + (size_t)(r * cols) * es, (size_t)cols * es,
                             at + (uint64_t)((t.row0 + r) * C + t.col0) * es);
        }
        model.release_unit(u);
    }
    CHECK(::close(fd) == 0, "closing '%s' failed: %s", path.c_str(), std::strerror(errno));
    // a layout whose ranks left a tensor to nobody, or wrote one twice, would leave a silently wrong file
    int64_t want = 0;
    for (const ParamTensor& t : full.tensors) want += t.numel();
    const double all = world ? world->all_reduce_scalar((double)written) : (double)written;
    CHECK(all == (double)want, "--export-hf %s: the ranks wrote %.0f values, the file holds %lld: some tensor was "
          "written by no rank or by two (the owner rule, counts_in_grad_norm, does not fit this layout)", dir.c_str(),
          all, (long long)want);
    barrier(world);
    if (world_rank() == 0) {
        write_hf_config(c, dtype, (fs::path(dir) / "config.json").string());
        std::vector<std::string> copied;
        for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"}) {
            std::error_code ec;
            const fs::path from = fs::path(source_dir) / f, to = fs::path(dir) / f;
            if (source_dir.empty() || !fs::exists(from, ec) || fs::equivalent(from.parent_path(), to.parent_path(), ec))
                continue;
            fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
            CHECK(!ec, "--export-hf: copying %s to %s failed: %s", from.c_str(), to.c_str(), ec.message().c_str());
            copied.push_back(f);
        }
        std::string also;
        for (const std::string& f : copied) also += " + " + f;
        std::printf("exported %s (%zu tensors, %s, %.1f MB) + config.json%s\n", path.c_str(), entries.size(),
                    safetensors_dtype_name(dtype), plan.file_bytes / 1e6, also.c_str());
    }
    return plan.file_bytes;
}

}  // namespace penta
