// ops_backend.hpp — the per-device implementations behind ops.hpp. ops.cpp checks the operands and
// dispatches on their device to penta::cpu:: (ops_cpu.cpp, attention_cpu.cpp) or penta::cuda::
// (cuda/*.cu, built when nvcc is found). Both declare the same functions, listed once in ops_backend.inc.
#pragma once
#include "ops.hpp"

namespace penta::cpu {
#include "ops_backend.inc"
}

namespace penta::cuda {
#include "ops_backend.inc"
// device memory for tensor.cpp; device_count() is 0 when no GPU is visible
int device_count();
// nullptr when the device is out of memory (the caller names what it allocated); other errors throw
void* device_malloc(size_t bytes);
int64_t device_total_memory();  // bytes of the current device
void device_free(void* p);
void memcpy_any(void* dst, const void* src, size_t bytes);  // any direction, synchronous
void memset_zero(void* p, size_t bytes);
}  // namespace penta::cuda
