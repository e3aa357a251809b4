// memory.cu — device memory for the tagged allocator (tensor.cpp): the caching pool's CUDA calls, and the
// copies between host and device.
//
// Playbook: "First steps: training on one GPU" — everything a step touches lives in device memory and the
// host only launches work, so the host must never wait for the GPU inside a step except to read the
// scalars it logs. Hence:
//   - tensors come from a stream-ordered caching pool (device_pool.hpp): cudaMalloc once per block,
//     never cudaFree in a step (cudaFree synchronises the device);
//   - host -> device copies of up to 4 MiB (token ids, targets, positions) go through pinned staging
//     blocks, from a second pool whose blocks the host may overwrite only once the copy that read them
//     has happened (the host is a "stream" of its own, kHostStream, and the copy's stream is recorded on
//     the block), so cudaMemcpyAsync returns at once; larger ones (a model's weights, at start-up) are
//     plain cudaMemcpy;
//   - device -> host copies are synchronous: the host reads the result next;
//   - device -> device copies and memsets are queued on the compute stream like kernels.
// Which GPU a rank uses is chosen once by the runtime (local rank), not here.
// Tested through tests/00_common/test_cuda.cpp (`build/bin/tests_00 -tc='*cuda*'` on a machine with a GPU)
// and the pool's logic through tests/00_common/test_device_pool.cpp (any machine).
#include <cstdio>
#include <cstring>
#include <exception>

#include "../device_pool.hpp"
#include "cuda_poll.hpp"
#include "cuda_util.cuh"

namespace penta::cuda {

namespace {

constexpr cudaStream_t kComputeStream = 0;            // where the ops run (the legacy default stream)
constexpr StreamId kHostStream = ~StreamId(0);        // the host writing a staging block: not a CUDA stream
constexpr size_t kStagedLimit = size_t(4) << 20;      // host -> device copies up to this go through pinned blocks

// The pool's device calls for device memory.
struct CudaDeviceMemory : DeviceMemoryApi {
    void* allocate(size_t bytes) override {
        void* p = nullptr;
        const cudaError_t err = cudaMalloc(&p, bytes);
        if (err == cudaErrorMemoryAllocation) {
            cudaGetLastError();  // not sticky: clear it, the allocator reports what it was allocating
            return nullptr;
        }
        CHECK(err == cudaSuccess, "cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(err));
        return p;
    }
    void release(void* p) override { CUDA_CHECK(cudaFree(p)); }
    void* record_event(StreamId s) override {
        cudaEvent_t e = nullptr;
        const cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        if (err == cudaErrorCudartUnloading) return nullptr;  // process exit: nothing runs any more
        CUDA_CHECK(err);
        CUDA_CHECK(cudaEventRecord(e, (cudaStream_t)s));
        return e;
    }
    bool event_done(void* e) override { return !e || cuda::event_done((cudaEvent_t)e, "device pool: cudaEventQuery"); }
    void destroy_event(void* e) override {
        if (e) cudaEventDestroy((cudaEvent_t)e);
    }
    void synchronize() override { CUDA_CHECK(cudaDeviceSynchronize()); }
};

// The same calls for pinned (page-locked) host memory: the staging blocks of host -> device copies.
struct PinnedHostMemory : CudaDeviceMemory {
    void* allocate(size_t bytes) override {
        void* p = nullptr;
        if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
            cudaGetLastError();  // no pinned memory left: the caller copies without staging
            return nullptr;
        }
        return p;
    }
    void release(void* p) override { CUDA_CHECK(cudaFreeHost(p)); }
};

// never destroyed: a static Tensor may hand its block back after every other static has gone
DevicePool& device_pool() {
    static DevicePool* pool = new DevicePool(*new CudaDeviceMemory);
    return *pool;
}
DevicePool& pinned_pool() {
    static DevicePool* pool = new DevicePool(*new PinnedHostMemory);
    return *pool;
}

}  // namespace

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // no driver or no device is an answer (0), not a sticky error for later calls
        return 0;
    }
    return n;
}

// One GPU per rank on a node: local rank r takes device r mod count (several ranks share a GPU when there
// are more ranks than GPUs, which the MPI backend allows). Called once by runtime_init.
void select_device(int local_rank) {
    int n = device_count();
    if (n > 0) CUDA_CHECK(cudaSetDevice(local_rank % n));
}

void* device_malloc(size_t bytes) { return device_pool().allocate(bytes, (StreamId)kComputeStream); }

void device_free(void* p) {
    // Called from Buffer's destructor, which must not throw. At process exit the runtime may already be
    // unloading; the memory goes with it, so that case is not an error.
    try {
        device_pool().release(p);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d] releasing device memory: %s\n", world_rank(), e.what());
    }
}

void record_stream(void* block, cudaStream_t s) { device_pool().record_stream(block, (StreamId)s); }
void forget_stream(cudaStream_t s) { device_pool().forget_stream((StreamId)s); }

DevicePoolStats device_pool_stats() { return device_pool().stats(); }
void device_pool_reset_peak() { device_pool().reset_peak(); }
void device_empty_cache() { device_pool().empty_cache(); }

int64_t device_total_memory() {
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return (int64_t)total;
}

void memcpy_any(void* dst, const void* src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void copy_to_device(void* dst, const void* host_src, size_t bytes) {
    if (!bytes) return;
    void* stage = bytes <= kStagedLimit ? pinned_pool().allocate(bytes, kHostStream) : nullptr;
    if (!stage) {
        CUDA_CHECK(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
        return;
    }
    std::memcpy(stage, host_src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, stage, bytes, cudaMemcpyHostToDevice, kComputeStream));
    pinned_pool().record_stream(stage, (StreamId)kComputeStream);  // the host may rewrite it once the copy ran
    pinned_pool().release(stage);
}

void copy_to_host(void* host_dst, const void* src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_on_device(void* dst, const void* src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, kComputeStream));
}

void memset_zero(void* p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, kComputeStream));
}

void device_synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace penta::cuda
