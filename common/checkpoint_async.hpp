// checkpoint_async.hpp — --save-async: the shard file written by a background thread while training goes on.
//
// The snapshot (checkpoint_save.hpp, phase 1) is taken on the training thread at the step boundary: the
// state is copied to host buffers the writer then owns, so the next steps may change the weights freely.
// Training stalls only for that copy; the write (phase 2) overlaps the following steps. The thread does
// file I/O only — no communication, so MPI needs no thread support — and the commit (phase 3, a reduction
// and rank 0's renames) stays on the training thread: Checkpointer polls at each step boundary and commits
// once every rank's writer is done; the next save waits for the previous one.
// Playbook: seed 003 (asynchronous checkpointing hides δ). Test: tests/00_common/test_checkpoint.cpp.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "checkpoint_save.hpp"

namespace penta {

struct ShardWriteResult {
    std::string error;  // "" on success
    ShardIndex index;
    double seconds = 0;  // the write, on the writer's thread
};

class AsyncShardWriter {
   public:
    AsyncShardWriter() = default;
    AsyncShardWriter(const AsyncShardWriter&) = delete;
    AsyncShardWriter& operator=(const AsyncShardWriter&) = delete;
    ~AsyncShardWriter();  // waits for a write in flight

    // takes the snapshot and writes it into tmp_dir on a thread; one write at a time (wait() first)
    void start(CheckpointSnapshot snap, const std::string& tmp_dir, const CheckpointFaults& faults);
    bool busy() const { return thread_.joinable(); }
    bool done() const { return done_.load(std::memory_order_acquire); }
    // joins the thread; the write's outcome (an error is returned, not thrown: the commit reports it)
    ShardWriteResult wait();

   private:
    std::thread thread_;
    std::atomic<bool> done_{false};
    std::unique_ptr<CheckpointSnapshot> snap_;
    ShardWriteResult result_;
};

}  // namespace penta
