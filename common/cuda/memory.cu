// memory.cu — device memory for the tagged allocator (tensor.cpp) and the copies between host and device.
//
// Playbook: "First steps: training on one GPU" — everything a step touches lives in device memory; the
// host only launches work. Copies use cudaMemcpyDefault: with unified virtual addressing the runtime
// tells host and device pointers apart, so one function serves every direction.
// Which GPU a rank uses is chosen once by the runtime (local rank), not here.
// Tested through tests/00_common/test_cuda.cpp (`build/bin/tests_00 -tc='*cuda*'` on a machine with a GPU).
#include <cstdio>

#include "cuda_util.cuh"

namespace penta::cuda {

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

void* device_malloc(size_t bytes) {
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // not sticky: clear it, the allocator reports what it was allocating
        return nullptr;
    }
    CHECK(err == cudaSuccess, "cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(err));
    return p;
}

int64_t device_total_memory() {
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return (int64_t)total;
}

void device_free(void* p) {
    // Called from Buffer's destructor, which must not throw. At process exit the runtime may already be
    // unloading; the memory goes with it, so that case is not an error.
    cudaError_t err = cudaFree(p);
    if (err != cudaSuccess && err != cudaErrorCudartUnloading)
        std::fprintf(stderr, "[rank %d] cudaFree: %s\n", world_rank(), cudaGetErrorString(err));
}

void memcpy_any(void* dst, const void* src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void memset_zero(void* p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemset(p, 0, bytes));
}

void device_synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace penta::cuda
