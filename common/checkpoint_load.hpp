// checkpoint_load.hpp — --resume: a rank fills its model and optimizer from a checkpoint folder, in the
// layout it runs now, which may differ from the one that saved (resharding).
//
// Every saved piece says which elements of which global tensor it holds (checkpoint_format.hpp), and every
// tensor this rank holds says where its block sits in the global one (ParamTensor's row0, col0, shape;
// ARCHITECTURE.md §4). So for each run of elements the rank needs — a tensor of its flat buffer, a range of
// its optimizer (a ZeRO shard is a run of a block) — it walks the run row by row, and for each global row
// copies the intersection with every old piece of that tensor and kind. Same layout: each run is exactly
// one old piece, copied bit for bit, so the run continues bit-exactly. Another tp, pp, dp, cp, ep or ZeRO
// stage: the same arithmetic, other intersections. An element no piece covers is an error naming the
// tensor (never a silent zero); vocab padding rows (beyond the global shape) are zero unless the old
// layout had the same padding.
//
// Errors name the file and what is wrong: no metadata.json, one whose checksum (metadata.json.crc32) differs,
// a field of the wrong type or range (named by its key path, json_strict.hpp: every offset, size and count is
// checked without a wrap before it is used), another model (a field or a tensor's global shape that
// differs), another data stream (global batch, seq, seed, data), a shard file missing or of another size
// (truncated), a piece whose CRC-32 differs (corrupted). A piece's CRC is checked the first time a rank
// reads it.
// Playbook: seed 003 (resharding metadata). Test: tests/00_common/test_checkpoint.cpp and test_file_fuzz.cpp
// (crafted and mutated metadata); the programs in tests/01_single_gpu (fp16), 02_data_parallel, 03_zero,
// 04_tensor_parallel, 06_context_parallel, 07_pipeline_parallel, 08_expert_parallel (the MoE bias): each
// one's checkpoint_test.sh.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint_format.hpp"
#include "checkpoint_save.hpp"

namespace penta {

class CheckpointReader {
   public:
    // reads and checks DIR/metadata.json and that every shard file exists with its size
    explicit CheckpointReader(const std::string& step_dir);
    ~CheckpointReader();
    CheckpointReader(const CheckpointReader&) = delete;
    CheckpointReader& operator=(const CheckpointReader&) = delete;

    const nlohmann::json& metadata() const { return meta_; }
    int64_t step() const { return step_; }
    int version() const { return version_; }  // 1: written before metadata.json had a checksum
    bool has_kind(PieceKind k) const;
    // throws when the checkpoint is of another model or another data stream than ctx describes
    void check_compatible(const CheckpointContext& ctx) const;
    // out[0 .. n) <- elements [begin, begin + n) of the row-major block that tensor t is on this rank
    // (row0, col0, shape), of kind k, as f32. Throws naming the tensor when an element is not covered.
    void read_run(const ParamTensor& t, PieceKind k, int64_t begin, int64_t n, float* out);

   private:
    struct Shard;
    const char* piece_bytes(size_t shard, size_t piece);  // CRC-checked on first use
    std::string dir_;
    nlohmann::json meta_;
    int64_t step_ = 0;
    int version_ = 0;
    std::vector<std::unique_ptr<Shard>> shards_;
    // tensor name -> kind -> (shard, piece) of every piece of it
    std::map<std::string, std::vector<std::pair<size_t, size_t>>[kPieceKinds]> index_;
};

// Fills model (its flat buffer, when it has one) and optim (its weights when they are not the model's
// buffer: ZeRO-3; the fp32 master; m, v; the step count) from dir, after check_compatible, and extras (the
// hooks' state tensors). Returns the step the checkpoint was
// taken after. Every rank calls it; it communicates nothing.
// Another precision policy than the saving run's is a precision change, allowed: the weights are converted to
// this run's dtype (from the fp32 master when the checkpoint has one and this run keeps none; a master from
// the master, or from the weights when the checkpoint has none), and the moments are fp32 in every policy.
int64_t load_checkpoint(const std::string& step_dir, Model& model, AdamW& optim, const CheckpointContext& ctx,
                        const CheckpointExtras& extras = {});

}  // namespace penta
