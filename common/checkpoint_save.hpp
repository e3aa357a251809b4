// checkpoint_save.hpp — saving a training run: every rank copies what only it holds to the host (a
// snapshot, at a step boundary), writes it as its shard file, and rank 0 makes the step visible once every
// rank has finished. Plus the policy around it: --save-every N or auto (√(2δM)), --keep K, --save-async.
//
// The three phases of one save (checkpoint_format.hpp has the files):
//   1. snapshot   the rank's pieces copied to host memory: the weights (the flat buffer's tensors, or a
//                 ZeRO-3 shard's ranges), the fp32 master, AdamW's m and v, a hook's state tensors
//                 (checkpoint_state.hpp), of the elements this rank is the one owner of
//                 (counts_in_grad_norm: coordinate 0 of every replicating axis);
//   2. write      step_X.tmp/rank_K.bin (each piece's CRC-32 computed as written), fsync, rename; its
//                 index rank_K.json likewise. Synchronous, or on checkpoint_async.hpp's thread;
//   3. commit     every rank says whether its write succeeded (one reduction over the world); on success
//                 rank 0 merges the indexes into metadata.json, renames step_X.tmp to step_X (an older
//                 step_X, saved before a resume, renamed aside first), points `latest` at it (tmp + fsync +
//                 rename), and drops the oldest beyond --keep. A crash before the last rename leaves
//                 `latest` at the previous complete checkpoint; a failed write (a full disk) removes the .tmp
//                 folder and stops the run naming the rank and the file.
//
// Playbook: seed 003 (checkpoint interval √(2δM), 12–14 bytes a parameter); ARCHITECTURE.md §4 (what each
// tensor knows). Run: `build/bin/01_single_gpu --steps 10 --save /tmp/ck --save-every 5` (docs/CHECKPOINTS.md).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint_format.hpp"
#include "checkpoint_state.hpp"
#include "comm.hpp"
#include "grid.hpp"
#include "model.hpp"
#include "optim.hpp"

namespace penta {

// What the metadata says about the run beside the tensors (and what a resume checks against).
struct CheckpointContext {
    LlamaConfig model;
    Precision precision;
    GridShape shape;            // the saving run's degrees
    bool sequence_parallel = false;
    int64_t global_batch = 0;   // sequences per step: sample g of step s is s·G + g (data.hpp)
    int64_t seq = 0;
    int64_t seed = 0;           // init and data are counter-based functions of it: the only RNG state
    std::string data;           // --data
    LRSchedule lr;
    AdamWConfig adamw;
};
// What a save writes and a resume restores beside the model and the optimizer: the state tensors of the
// layout's hooks.
struct CheckpointExtras {
    std::vector<StateTensor> state;  // checkpoint_state.hpp
};
// metadata.json's run part: format, model, precision, layout, data position, rng, lr schedule, optimizer
nlohmann::json run_metadata(const CheckpointContext& c, int64_t step, int optimizer_steps, int world_size);

// Phase 1: one rank's pieces and their bytes (file order), on the host.
struct CheckpointSnapshot {
    int64_t step = 0;
    int rank = 0;
    nlohmann::json coords;
    nlohmann::json tensors;  // {name: full shape} of the tensors this rank holds
    std::vector<CheckpointPiece> pieces;  // offsets assigned; crc filled by write_shard
    std::vector<char> bytes;
};
CheckpointSnapshot snapshot_state(Model& model, const AdamW& optim, const GridCoords& coords, int rank,
                                  int64_t step, const std::vector<StateTensor>& state = {});

// Phase 2: writes snap's file and index into tmp_dir (the step's .tmp folder); throws naming the file.
ShardIndex write_shard(CheckpointSnapshot& snap, const std::string& tmp_dir, const CheckpointFaults& faults);
// rank_K.json beside the shard: the index, and the tensors' global shapes
std::string shard_index_name(int rank);

// What a committed save measured (rank 0's figures; bytes over every rank).
struct SavedCheckpoint {
    std::string dir;          // the step folder
    uint64_t bytes = 0;       // all shard files together
    uint64_t kind_bytes[kPieceKinds] = {};
    double bytes_per_param = 0;  // bytes / the FULL model's parameters
};

// Phase 0 (before any rank writes): rank 0 removes a stale step_X.tmp and creates it; then a barrier.
std::string prepare_step_dir(const std::string& save_dir, int64_t step, Comm* world);
// Phase 3, collective over world (nullptr: one rank). local_error: "" when this rank's write succeeded.
SavedCheckpoint commit_checkpoint(const std::string& save_dir, int64_t step, const nlohmann::json& run_meta,
                                  const std::string& local_error, Comm* world, int64_t keep, int64_t full_params);

// --- the policy: when to save, sync or async ---
struct CheckpointOptions {
    std::string dir;           // --save ("": never)
    int64_t every = 0;         // --save-every N; 0: only at the end; -1: auto
    double mtbf_hours = 24;    // --mtbf-hours, for auto
    int64_t keep = 0;          // --keep K (0: all)
    bool async = false;        // --save-async
};
// Seed 003: the interval that minimises the expected time lost, δ per save + half an interval redone
// after each failure: τ = √(2 δ M) (Young's approximation), in seconds.
double optimal_checkpoint_interval(double save_seconds, double mtbf_seconds);

class AsyncShardWriter;

class Checkpointer {
   public:
    Checkpointer(CheckpointOptions opt, Model& model, AdamW& optim, CheckpointContext ctx, GridCoords coords,
                 Comm* world, CheckpointExtras extras = {});
    ~Checkpointer();
    // whether after_step(step, ..., last) will save (every rank decides alike): the loop settles what a save
    // reads (ZeRO-1's deferred weight gathers) for these steps only
    bool due(int64_t step, bool last) const;
    // after step `step` (1-based) took step_seconds: saves when due
    void after_step(int64_t step, double step_seconds, bool last);
    // waits for an async save in flight and commits it (every rank calls it at the end of training)
    void finish();
    int64_t interval() const { return every_; }

   private:
    void save(int64_t step);
    void commit_pending();
    // --save-every auto, after the first save took `seconds` (δ)
    void choose_interval(double seconds, int64_t step, const char* what);
    void report(const SavedCheckpoint& s, int64_t step, double stall, double seconds);  // seconds: the write

    CheckpointOptions opt_;
    Model& model_;
    AdamW& optim_;
    CheckpointContext ctx_;
    GridCoords coords_;
    Comm* world_;
    CheckpointExtras extras_;
    int64_t every_ = 0;  // the interval in steps (auto: after the first save)
    double step_seconds_sum_ = 0;
    int64_t steps_seen_ = 0;
    std::unique_ptr<AsyncShardWriter> writer_;
    int64_t pending_step_ = 0;  // an async save written in the background, not yet committed
    double pending_stall_ = 0;
    nlohmann::json pending_meta_;
};

}  // namespace penta
