// checkpoint_async.cpp — see checkpoint_async.hpp.
#include "checkpoint_async.hpp"

#include <chrono>

namespace penta {

AsyncShardWriter::~AsyncShardWriter() {
    if (thread_.joinable()) thread_.join();
}

void AsyncShardWriter::start(CheckpointSnapshot snap, const std::string& tmp_dir, const CheckpointFaults& faults) {
    CHECK(!busy(), "checkpoint: an asynchronous write of step %ld is still in flight", (long)(snap_ ? snap_->step : 0));
    snap_ = std::make_unique<CheckpointSnapshot>(std::move(snap));
    done_.store(false, std::memory_order_release);
    result_ = ShardWriteResult{};
    thread_ = std::thread([this, tmp_dir, faults] {
        const auto t0 = std::chrono::steady_clock::now();
        try {
            result_.index = write_shard(*snap_, tmp_dir, faults);
        } catch (const std::exception& e) {
            result_.error = e.what();
        }
        result_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        snap_->bytes = std::vector<char>();  // the host copy is released as soon as it is on disk
        done_.store(true, std::memory_order_release);
    });
}

ShardWriteResult AsyncShardWriter::wait() {
    CHECK(busy(), "checkpoint: no asynchronous write to wait for%s", "");
    thread_.join();
    snap_.reset();
    return std::move(result_);
}

}  // namespace penta
