// device_pool.hpp — the bookkeeping of a stream-ordered caching allocator: which block of device memory
// may serve which request, on which stream, and when. The device calls it makes (cudaMalloc, events) come
// through DeviceMemoryApi: cuda/memory.cu passes the CUDA runtime, the tests a fake.
//
// Playbook: "Data parallelism" (overlapping communication with backward needs the GPU never to stop) and
// "Memory usage in Transformers" (the peak is what decides whether a run fits). cudaFree synchronises the
// whole device, and every op of a step allocates its activations and workspace: freeing them with
// cudaFree would stop the GPU a few hundred times per step, and NCCL's kernels on the comm stream with it.
// So freed blocks are kept and handed out again, the way PyTorch's caching allocator does:
//   - sizes are rounded to size classes (size_class), and a request takes a free block of its class;
//   - free lists are per stream. A block is handed out on a stream; work on one stream runs in order, so
//     a block freed on its stream may serve the next request on that stream at once, even while the GPU
//     still runs the kernels that used it: whatever uses it next is queued after them;
//   - a block also used on another stream (record_stream: NCCL's comm stream, or the host writing a
//     pinned staging buffer) is not reusable when freed: an event is recorded on each such stream at the
//     free, and the block joins its free list only once every one of those events has happened;
//   - when the device is out of memory, every cached block is handed back (after a device synchronise,
//     so pending blocks are safe) and the request is tried once more.
// Stats: bytes handed out (rounded) and bytes held from the device (handed out + cached), current and
// peak, so the memory table shows what nvidia-smi would (Tensor's MemStats counts the tensors by tag).
// Single-threaded, as every caller of the tensor allocator is.
// Tested by tests/00_common/test_device_pool.cpp on any machine (`make test CH=00`).
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <vector>

namespace penta {

using StreamId = uintptr_t;  // a cudaStream_t as a number; 0 is the legacy default stream

// What the pool asks of the device.
struct DeviceMemoryApi {
    virtual ~DeviceMemoryApi() = default;
    virtual void* allocate(size_t bytes) = 0;  // nullptr when the device is out of memory
    virtual void release(void* p) = 0;
    virtual void* record_event(StreamId s) = 0;  // an event recorded on stream s now
    virtual bool event_done(void* event) = 0;
    virtual void destroy_event(void* event) = 0;
    virtual void synchronize() = 0;  // every stream's work done (before blocks go back to the device)
};

struct DevicePoolStats {
    int64_t in_use = 0, in_use_peak = 0;      // bytes of blocks handed out (size classes, not requests)
    int64_t reserved = 0, reserved_peak = 0;  // bytes held from the device: in use + cached
    int64_t device_allocs = 0, device_frees = 0, reuses = 0;  // calls to the device; requests served from cache
    int64_t waiting = 0;                      // blocks freed but waiting for another stream's events
    int64_t cached() const { return reserved - in_use; }
};

class DevicePool {
   public:
    explicit DevicePool(DeviceMemoryApi& api) : api_(api) {}
    DevicePool(const DevicePool&) = delete;
    DevicePool& operator=(const DevicePool&) = delete;

    // The size class of a request: up to 1 MiB a multiple of 512 bytes; up to 256 MiB the next of the
    // eight steps of its power of two (2^k · (1 + i/8), at most 12.5% more); above that a multiple of
    // 2 MiB (the parameters, gradients and AdamW moments: allocated once, rounded little).
    static size_t size_class(size_t bytes);

    // A block of at least `bytes` for work on `stream`; nullptr when the device has no memory for it even
    // after the cache went back. The block's address is the pointer returned.
    void* allocate(size_t bytes, StreamId stream);
    // The block at p (from allocate) is free: reusable on its stream at once, or after the events of the
    // streams record_stream named.
    void release(void* p);
    // The block at p is used on stream s too.
    void record_stream(void* p, StreamId s);
    // Stream s is about to be destroyed, its work over: blocks in use stop recording it (a block released
    // later must not record an event on a stream that no longer exists).
    void forget_stream(StreamId s);
    // Hands every free block back to the device (waiting ones after a synchronise).
    void empty_cache();
    // Moves waiting blocks whose events have happened to their free lists (allocate does this itself).
    void collect();

    const DevicePoolStats& stats() const { return stats_; }
    void reset_peak() {
        stats_.in_use_peak = stats_.in_use;
        stats_.reserved_peak = stats_.reserved;
    }
    // the size class and stream of a block handed out (for tests and messages); size 0 if p is not one
    struct BlockInfo {
        size_t size = 0;
        StreamId stream = 0;
    };
    BlockInfo info(void* p) const;

   private:
    struct Block {
        size_t size = 0;
        StreamId stream = 0;            // where it was handed out: its free list
        std::vector<StreamId> also_on;  // other streams that used it since (record_stream)
        bool in_use = false;
    };
    struct Waiting {
        void* ptr;
        std::vector<void*> events;  // one per stream in also_on at the release
    };
    Block& block(void* p, const char* what);
    void make_free(void* p, Block& b);

    DeviceMemoryApi& api_;
    std::unordered_map<void*, Block> blocks_;                     // every block held from the device
    std::map<std::pair<StreamId, size_t>, std::vector<void*>> free_;  // (stream, size class) -> free blocks
    std::deque<Waiting> waiting_;                                 // released, events not yet all done
    DevicePoolStats stats_;
};

}  // namespace penta
