// hf_checkpoint.hpp — Hugging Face Llama checkpoints in and out: `--model DIR` loads a folder that
// transformers' save_pretrained wrote (or one downloaded from the hub), `--export-hf DIR` writes one back.
//
//   DIR/config.json                         the architecture (model_config.hpp reads it)
//   DIR/model.safetensors                   every weight, or
//   DIR/model.safetensors.index.json        {"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors", ...}}
//
// Loading into any layout: every rank memory-maps the files and copies out only the slices its layout
// holds (ParamTensor: the rows of a column-parallel q/k/v/gate/up shard, the columns of a row-parallel
// o/down shard, the vocab rows of the embedding and head, the layers of its pipeline stage), converting
// bf16 / f16 / f32 to the parameter dtype of the precision policy. Before any byte is read, every tensor the
// model needs must be in the files with the shape the config implies, and the files may hold nothing the
// model would ignore silently (a bias, an unknown tensor) except a tied model's lm_head copy and the
// rotary table some exports carry.
//
// Exporting from any layout: one consolidated model.safetensors; a mixture of experts as Mixtral
// (check_hf_exportable), anything transformers would compute otherwise refused before a byte is written. Rank 0 writes the header (every offset
// is known from the config alone) and the file's size; then every rank writes, at its offset, the part of
// each tensor only it is responsible for (the rule of the gradient norm: counts_in_grad_norm — its own tp
// shard, dp/cp/edp coordinate 0 for replicas, the first stage for a tied table), a ZeRO-3 rank gathering
// each unit first. No rank ever holds the whole model. The ranks must share the folder's file system.
// Both directions work from the WHOLE model's list of tensors (ParamLayout::whole: every expert, whatever
// E/ep of them this rank holds) and each rank's own layout, which names the same global tensors: an expert
// is a tensor of its own ("...experts.5.w1.weight"), held whole by its ep rank (or its tp slice). The ranks'
// written values must add up to the file's (an all-reduce of one count), else the export fails on every rank.
//
// Playbook: "5D parallelism in a nutshell" (checkpoints in any layout). Run:
//   build/bin/01_single_gpu --model ~/SmolLM-135M --data llmc:'shards/train_*.bin' --export-hf out/
// Test: tests/01_single_gpu/test_hf_checkpoint.cpp (transformers' random Llamas, one rank) and
// tests/04_tensor_parallel/test_hf_tp.cpp (tp2, tp2 with two pipeline stages, export round trip),
// tests/08_expert_parallel/test_hf_mixtral.cpp and hf_export_test.sh (Mixtral at ep 1, 2, 4; tp, ZeRO-3),
// tests/09_5d/hf_export_test.sh (ep 2 × pp 2).
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm.hpp"
#include "grid.hpp"
#include "model.hpp"
#include "safetensors.hpp"

namespace penta {

// true when path is a directory holding a config.json (what --model DIR means)
bool is_hf_model_dir(const std::string& path);

// The progress line of a large load: "loading DIR: 41% (1.20 of 2.94 GB)" at most every `every_seconds`, then
// "loading DIR: done, 2.94 GB in 5.1 s", printed by world rank 0 to `out` when the rank reads at least
// `from_bytes` (smaller loads take no noticeable time)
struct LoadProgressOptions {
    std::FILE* out = stdout;
    double from_bytes = 256e6, every_seconds = 2;
};

// Where a model's first weights come from when they are not init_params' seeded values (ModelOptions::weights).
class HfCheckpoint {
   public:
    // Opens DIR's safetensors files (model.safetensors or the index's shards), checking each file's header
    // and that the index and the files agree. Throws naming the file, the tensor and the rule.
    explicit HfCheckpoint(const std::string& dir, const LoadProgressOptions& progress = {});
    const std::string& dir() const { return dir_; }
    // against the full model (built with the model's cores), before anything is allocated: every tensor present
    // with its full shape and a dtype we read, no tensor left over but a tied model's lm_head copy and a rotary
    // table; throws naming the tensor
    void check(const ParamLayout& full) const;
    // the values of layout's tensors, this rank's slices of each, into flat, exactly as init_params would write
    // seeded ones (a unit's or a shard's layout works too); rank 0 prints progress on a big load
    void fill(const ParamLayout& layout, Tensor& flat) const;

   private:
    struct Source {
        const SafetensorsFile* file;
        const SafeTensor* tensor;
    };
    const Source& source(const std::string& name) const;
    std::string dir_;
    LoadProgressOptions progress_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, Source> sources_;
};

// Writes DIR/model.safetensors (the parameter dtype: f32, bf16 or f16) and DIR/config.json from `model`, in
// whatever layout it is; copies the tokenizer files from `source_dir` when it has them (the folder the model
// was loaded from; "" for none). Every rank of the job calls it (world: nullptr on one rank); coords: this
// rank's place in the grid. Returns the bytes of the file (rank 0 prints what it wrote).
uint64_t export_hf(Model& model, const std::string& dir, const GridCoords& coords, Comm* world,
                   const std::string& source_dir = "");

// A mixture of experts exports as transformers' MixtralForCausalLM (config keys and tensor names): throws
// naming each feature Mixtral has no place for (shared experts, sigmoid scores, top-k weights left
// unnormalised, dense layers first, DeepSeek's names, a head_dim of its own, a llama3 rope_scaling). Nothing
// for a dense Llama.
void check_hf_exportable(const LlamaConfig& c);
// config.json for transformers' LlamaForCausalLM, or MixtralForCausalLM for a mixture of experts: our config's
// keys, and torch_dtype from `dtype` (the caller has checked check_hf_exportable: export_hf does)
void write_hf_config(const LlamaConfig& c, DType dtype, const std::string& path);

}  // namespace penta
