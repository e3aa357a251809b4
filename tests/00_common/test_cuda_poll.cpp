// test_cuda_poll.cpp — query_done (common/cuda/cuda_poll.hpp), the one helper every event and stream poll of
// the CUDA backend goes through, on fake error codes: a pending answer (cudaErrorNotReady) is consumed from
// the last-error slot, so the next kernel-launch check does not read it as a failure; a finished one is
// true; a real error throws by name; an earlier unrelated error is left for its own check.
// Runs on any machine of a CUDA build (no GPU needed: the codes are faked through the helper's slot).
//   build/bin/tests_00 -ts='ch00 np1' -tc='*query_done*'
#include "../testing.hpp"

#if defined(PENTA_CUDA)
#include "../../common/cuda/cuda_poll.hpp"
#endif

using namespace penta;
using penta::testing::contains;
using penta::testing::error_of;

#if defined(PENTA_CUDA)
namespace {

// A thread's last-error slot as the runtime keeps it: the first error since the last get() stays.
cudaError_t g_last = cudaSuccess;
cudaError_t fake_peek() { return g_last; }
cudaError_t fake_get() {
    const cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}
const cuda::LastErrorSlot kFakeSlot{&fake_peek, &fake_get};

// what cudaEventQuery does on a runtime that records its "not ready" answer as the last error
cudaError_t fake_query(bool done, bool records_not_ready = true) {
    if (done) return cudaSuccess;
    if (records_not_ready && g_last == cudaSuccess) g_last = cudaErrorNotReady;
    return cudaErrorNotReady;
}

// what KERNEL_CHECK does after a launch: throw if the slot holds an error
void launch_check() {
    const cudaError_t e = fake_get();
    CHECK_MESSAGE(e == cudaSuccess, "the launch check after a poll read " << cudaGetErrorName(e));
}

}  // namespace
#endif

TEST_SUITE("ch00 np1") {

TEST_CASE("query_done: a pending poll leaves no error for the next launch check; errors throw by name") {
#if !defined(PENTA_CUDA)
    SKIP_TEST("built without CUDA (cuda_poll.hpp needs the CUDA runtime's header)");
#else
    // pending, on a runtime that records cudaErrorNotReady: false, and the slot is clean again
    g_last = cudaSuccess;
    CHECK_FALSE(cuda::query_done(fake_query(false), "test event", kFakeSlot));
    CHECK(g_last == cudaSuccess);
    launch_check();
    // polling many times while pending, then done: every launch check in between is clean
    for (int i = 0; i < 3; i++) {
        CHECK_FALSE(cuda::query_done(fake_query(false), "test event", kFakeSlot));
        launch_check();
    }
    CHECK(cuda::query_done(fake_query(true), "test event", kFakeSlot));
    launch_check();
    // a runtime that does not record "not ready": still false, and nothing is taken from the slot
    g_last = cudaSuccess;
    CHECK_FALSE(cuda::query_done(fake_query(false, false), "test event", kFakeSlot));
    CHECK(g_last == cudaSuccess);
    // an unrelated error already in the slot (an unchecked launch) is not swallowed by the poll
    g_last = cudaErrorLaunchOutOfResources;
    CHECK_FALSE(cuda::query_done(fake_query(false), "test event", kFakeSlot));
    CHECK(g_last == cudaErrorLaunchOutOfResources);
    g_last = cudaSuccess;
    // a real failure of the polled work throws, naming what was polled and the error
    const std::string e = error_of([] { cuda::query_done(cudaErrorIllegalAddress, "cudaEventQuery of an all_reduce", kFakeSlot); });
    CHECK(contains(e, "cudaEventQuery of an all_reduce failed"));
    CHECK(contains(e, "cudaErrorIllegalAddress"));
    // the helper's default slot is the runtime's own
    const cuda::LastErrorSlot runtime;
    const bool is_runtime = runtime.peek == &cudaPeekAtLastError && runtime.get == &cudaGetLastError;
    CHECK(is_runtime);
#endif
}

}  // TEST_SUITE
