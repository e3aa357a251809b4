// cuda_poll.hpp — asking the GPU "is it done yet?" without leaving an error behind: the one helper every
// poll of an event or a stream goes through (the NCCL backend's waits, the device pool's reuse rule).
//
// Playbook: "Data parallelism" (overlap: the host keeps launching while a collective runs, and polls it).
// cudaEventQuery and cudaStreamQuery answer cudaErrorNotReady while work is pending. That is an answer,
// not a failure, but the runtime may also record it as the thread's "last error" — and the next
// KERNEL_CHECK (cudaGetLastError after a launch) would then report a healthy launch as "device not
// ready". query_done() turns the answer into a bool and consumes that one recorded code; any other
// error throws, naming what was polled; an unrelated error recorded earlier is left for its own check.
// Plain C++ (the CUDA runtime's header only), so the logic is tested on any machine with fake codes:
// tests/00_common/test_cuda_poll.cpp (`make test CH=00`).
#pragma once
#include <cuda_runtime_api.h>

#include "../core.hpp"

namespace penta::cuda {

// The thread's last-error slot: read it without clearing (peek), read and clear it (get). The runtime's
// own by default; a test passes fakes.
struct LastErrorSlot {
    cudaError_t (*peek)() = &cudaPeekAtLastError;
    cudaError_t (*get)() = &cudaGetLastError;
};

// `result` is what cudaEventQuery / cudaStreamQuery returned for `what`: true when the work is done,
// false when it is pending (the recorded cudaErrorNotReady consumed); any other code throws.
inline bool query_done(cudaError_t result, const char* what, const LastErrorSlot& slot = {}) {
    if (result == cudaSuccess) return true;
    if (result == cudaErrorNotReady) {
        if (slot.peek() == cudaErrorNotReady) slot.get();  // ours: consume it; anything else is someone else's
        return false;
    }
    // fail_at, not FAIL: the tests include this after doctest has taken the FAIL macro's name
    ::penta::fail_at(__FILE__, __LINE__, strfmt("%s failed: %s (%s)", what, cudaGetErrorString(result),
                                                cudaGetErrorName(result)));
}

inline bool event_done(cudaEvent_t e, const char* what) { return query_done(cudaEventQuery(e), what); }
inline bool stream_done(cudaStream_t s, const char* what) { return query_done(cudaStreamQuery(s), what); }

}  // namespace penta::cuda
