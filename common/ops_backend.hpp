// ops_backend.hpp — the per-device implementations behind ops.hpp. ops.cpp checks the operands and
// dispatches on their device to penta::cpu:: (ops_cpu.cpp, attention_cpu.cpp) or penta::cuda::
// (cuda/*.cu, built when nvcc is found). Both declare the same functions, listed once in ops_backend.inc.
#pragma once
#include "device_pool.hpp"
#include "ops.hpp"

namespace penta::cpu {
#include "ops_backend.inc"
}

namespace penta::cuda {
#include "ops_backend.inc"
// the online-softmax merge's kernel (ops.hpp attention_merge_gpu); its CPU side is chapter 06's
// (06_context_parallel/online_softmax.cpp)
void attention_merge(Tensor& out, Tensor& lse, const Tensor& out_part, const Tensor& lse_part);
// device memory for tensor.cpp (cuda/memory.cu); device_count() is 0 when no GPU is visible
int device_count();
// from the caching pool (device_pool.hpp), for the compute stream; nullptr when the device is out of
// memory (the caller names what it allocated); other errors throw
void* device_malloc(size_t bytes);
void device_free(void* p);  // back to the pool (never cudaFree: that would synchronise the device)
DevicePoolStats device_pool_stats();
void device_pool_reset_peak();
void device_empty_cache();     // hands the pool's free blocks back to the device
int64_t device_total_memory();  // bytes of the current device
void memcpy_any(void* dst, const void* src, size_t bytes);  // any direction, synchronous
// the copies ops.cpp's copy() makes, by direction: host -> device returns at once for up to 4 MiB
// (pinned staging); device -> host waits for the result; device -> device is queued like a kernel
void copy_to_device(void* dst, const void* host_src, size_t bytes);
void copy_to_host(void* host_dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes);
void memset_zero(void* p, size_t bytes);  // queued on the compute stream
}  // namespace penta::cuda
