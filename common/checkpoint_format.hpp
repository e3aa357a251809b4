// checkpoint_format.hpp — what a training checkpoint is on disk: the step folder, its per-rank shard files,
// the one metadata file, the checksum, and the file-system steps that make a save atomic.
//
//   DIR/latest                      "step_000005": the last COMPLETE checkpoint (written last, atomically)
//   DIR/step_000005/metadata.json   model config, precision, layout, every tensor's global shape, every
//                                   rank's pieces (which elements of which tensor, where in which file, CRC32),
//                                   step, data position, RNG, LR schedule, optimizer scalars
//   DIR/step_000005/metadata.json.crc32  "1a2b3c4d  metadata.json": the CRC-32 of metadata.json's bytes
//                                   (version 2; a version-1 checkpoint has none, docs/CHECKPOINTS.md)
//   DIR/step_000005/rank_00003.bin  rank 3's pieces, back to back: raw little-endian values, no header
//   DIR/step_000005.tmp/            a save in progress (a crash leaves it; the next save removes it)
//   DIR/step_000005.old/            the previous save of the same step while it is replaced (a resumed run
//                                   saving again a step it had saved): removed once `latest` is written
//
// A piece is a run of elements of ONE tensor as one rank holds it: the rank's block of the global tensor
// (rows [row0, row0 + rows) × cols [col0, col0 + cols) of the full matrix: its tp shard, or all of it) and
// the run [begin, begin + count) of that block's row-major elements (a ZeRO shard holds a run of a block).
// Every element therefore has a global (row, col), whatever the layout, and a loader with another layout
// reads the pieces that cover the elements it needs (checkpoint_load.hpp): resharding is index arithmetic.
// Kinds: "param" (the weights, in the parameter dtype: f32, bf16 or f16), "master" (fp32 master), "m", "v"
// (AdamW's moments), "state" (f32 training state a hook keeps outside the model and the optimizer, named
// like a parameter: chapter 08's balance bias; checkpoint_state.hpp).
// Of the ranks holding the same values exactly one writes them (counts_in_grad_norm's rule), so the folder
// holds each value once: 4 + 4 + 4 = 12 bytes a parameter in fp32 without master, 2 + 4 + 4 + 4 = 14 with
// bf16 or f16 weights and an fp32 master (seed 003; docs/CHECKPOINTS.md).
//
// Playbook: "5D parallelism in a nutshell" / seed 003 (checkpoint size, resharding metadata).
// Test: `build/bin/tests_00 -tc='*checkpoint*'` (make test CH=00).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core.hpp"
#include "json_strict.hpp"

namespace penta {

// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), as zlib's crc32: crc32_update(0, p, n) of a whole
// buffer equals feeding it in parts.
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);

enum class PieceKind : uint8_t { param, master, m, v, state };
constexpr int kPieceKinds = 5;
const char* piece_kind_name(PieceKind k);  // "param", "master", "m", "v", "state"

struct CheckpointPiece {
    std::string tensor;  // Hugging Face name
    PieceKind kind = PieceKind::param;
    DType dtype = DType::f32;            // as stored: f32, or the weights' bf16 / f16
    int64_t row0 = 0, col0 = 0, rows = 0, cols = 0;  // the rank's block of the global tensor (a vector: cols 1)
    int64_t begin = 0, count = 0;        // the run of the block's row-major elements
    uint64_t offset = 0;                 // bytes into the rank's shard file
    uint32_t crc = 0;                    // CRC-32 of its count × dtype_size bytes
    uint64_t nbytes() const { return (uint64_t)count * dtype_size(dtype); }
};

// One rank's file and what it holds.
struct ShardIndex {
    int rank = 0;
    std::string file;        // "rank_00003.bin", relative to the step folder
    uint64_t bytes = 0;      // the file's size
    uint32_t crc = 0;        // CRC-32 of the whole file
    nlohmann::json coords;   // {"dp":..,"pp":..,"cp":..,"tp":..} of the saving rank
    std::vector<CheckpointPiece> pieces;
};

// Every size in the metadata is below 2^31 (a tensor's dimension, a block's rows or cols, a block's origin):
// a model's dimensions are (model_config.cpp), and products of two such sizes cannot wrap an int64.
constexpr int64_t kCheckpointMaxDim = INT32_MAX;

// The JSON of a piece and of a shard entry. The readers check every field's type and range (a bad one throws
// naming the file and the key, json_strict.hpp) and that a piece's run fits its block; whether a piece lies
// inside its file is piece_fits, checked by the reader once it knows the file's size.
nlohmann::json to_json(const CheckpointPiece& p);
CheckpointPiece piece_from_json(const JsonField& j);
nlohmann::json to_json(const ShardIndex& s);
ShardIndex shard_from_json(const JsonField& j);
// bytes [offset, offset + nbytes) inside a file of file_bytes, computed without a wrap (an offset of 2^64 - 8
// plus 16 bytes is past the end, not at byte 8)
bool piece_fits(const CheckpointPiece& p, uint64_t file_bytes);

constexpr const char* kCheckpointFormat = "pentatron-checkpoint";
// 2: metadata.json has its checksum beside it (metadata.json.crc32). The reader accepts 1 and 2.
constexpr int kCheckpointVersion = 2;
constexpr const char* kMetadataChecksumFile = "metadata.json.crc32";

// Writes step_dir/metadata.json (bytes) and its checksum file, each atomically (write_file_atomic); the saver
// does it inside the .tmp folder, so both appear with the folder's rename.
void write_metadata(const std::string& step_dir, const std::string& bytes);
// The checksum file's text for those bytes: "1a2b3c4d  metadata.json\n" (8 hex digits, as crc32(1) prints them)
std::string metadata_checksum_line(const std::string& bytes);

std::string step_dir_name(int64_t step);  // "step_000005"
std::string rank_file_name(int rank);     // "rank_00003.bin"

// --- the file-system steps of an atomic save ---
// Writes `bytes` to path + ".tmp", fsyncs it, renames it to path. Throws naming the file and errno's text.
void write_file_atomic(const std::string& path, const std::string& bytes);
// fsync of a directory: makes the renames inside it durable
void fsync_dir(const std::string& dir);

// Test hooks, read from the environment once per save (never set in a real run):
//   PENTA_CKPT_SLOW_SECONDS=S   every rank's shard write sleeps S seconds in the middle (after half its
//                               pieces): a crash test kills a rank then (tests/02_data_parallel)
//   PENTA_CKPT_SLOW_STEP=N      only the save of step N is slow (unset: every save)
//   PENTA_CKPT_DISK_BYTES=N     a shard write fails with ENOSPC ("No space left on device") once its file
//                               would pass N bytes: a full disk, without mounting one
struct CheckpointFaults {
    double slow_seconds = 0;
    int64_t slow_step = 0;    // 0: every save
    int64_t disk_bytes = -1;  // -1: no limit
    static CheckpointFaults from_env(int64_t step);  // the faults of the save of `step`
};

// --save-every: "N" or "auto" -> N (-1 for auto); throws naming the flag and the rule
int64_t parse_save_every(const std::string& v);

// The step folder --resume names: "latest" (then `save_dir`'s latest), a folder with a `latest` file (the
// step it names), or a step folder (with metadata.json; when it has none and its `.old` twin has, the twin:
// a re-save of that step interrupted between its two renames). Throws naming the flag, the path and what
// is missing.
std::string resolve_resume_dir(const std::string& resume, const std::string& save_dir);

}  // namespace penta
