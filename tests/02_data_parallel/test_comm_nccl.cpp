// test_comm_nccl.cpp — the NCCL backend (common/cuda/comm_nccl.cu) on ONE GPU: NCCL needs a GPU per rank,
// so on a one-GPU machine the group has one rank. That still runs every code path but the padded uneven
// parts: creation (unique id, device choice), every collective, send/recv batching (a send to self and the
// matching receive must go out as one NCCL group, or the GPU waits forever), split, the stream ordering of
// wait(), polling with test() (no error left for the next launch), the pool's cross-stream reuse rule,
// counters and the error messages. Skipped without a GPU.
//   build/bin/tests_02 -ts='ch02 np1' -tc='*NCCL*'
#include "../../common/comm.hpp"
#include "../testing.hpp"

using namespace penta;
using penta::testing::check_close;
using penta::testing::contains;
using penta::testing::error_of;
using penta::testing::random_tensor;

TEST_SUITE("ch02 np1") {

TEST_CASE("[gpu] NCCL backend on one GPU: collectives, send/recv batching, split, counters, errors") {
#if !defined(PENTA_NCCL)
    SKIP_TEST("built without NCCL");
#else
    SKIP_WITHOUT_GPU();
    auto comm = make_world_comm(CommBackend::nccl);
    REQUIRE(comm->backend() == CommBackend::nccl);
    REQUIRE(comm->size() == 1);
    const int64_t M = 4099;
    Tensor x = random_tensor({M}, 7, 1.0f, Device::cuda);
    const std::vector<float> ref = x.to_host();

    // all_reduce on one rank is the identity, in every dtype NCCL reduces
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
        Tensor y = Tensor::empty({M}, dt, Device::cuda, Tag::workspace);
        convert(y, x);
        const std::vector<float> before = y.to_host();
        comm->all_reduce(y);
        comm->all_reduce(y, ReduceOp::max);
        check_close(y.to_host(), before, 0, 0, std::string("all_reduce ") + dtype_name(dt));
    }
    // wait() orders the compute stream after NCCL: a kernel launched after it sees the result
    Tensor y = x.clone(Device::cuda, Tag::workspace);
    CommHandle h = comm->all_reduce_async(y);
    h.wait();
    scale_inplace(y, 2.0f);
    std::vector<float> twice = ref;
    for (float& v : twice) v *= 2;
    check_close(y.to_host(), twice, 0, 0, "a kernel after wait()");
    CommHandle t = comm->all_reduce_async(y);
    while (!t.test()) {
    }
    // A poll that finds an operation pending leaves no error behind (cuda_poll.hpp): the kernel launched
    // next passes its launch check. Work queued on compute first keeps the all-reduce pending for a while.
    {
        Tensor slow = Tensor::zeros({int64_t(1) << 26}, DType::f32, Device::cuda, Tag::workspace);  // 256 MiB
        for (int i = 0; i < 8; i++) scale_inplace(slow, 1.5f);
        CommHandle p = comm->all_reduce_async(y);
        int64_t pending = 0;
        while (!p.test()) pending++;
        scale_inplace(y, 1.0f);  // KERNEL_CHECK: "device not ready" here was the bug
        MESSAGE("test() found the all-reduce pending " << pending << " times");
        CHECK_NOTHROW(comm->all_reduce_scalar(1.0));
    }
    // A tensor an operation used goes back to the pool only behind an event on the comm stream
    {
        Tensor tmp = x.clone(Device::cuda, Tag::workspace);
        const int64_t waiting = device_pool_stats().waiting;  // (no allocation from here on: none is collected)
        comm->all_reduce(tmp);
        tmp = Tensor();  // freed on the host while the comm stream may still run
        CHECK(device_pool_stats().waiting == waiting + 1);
        device_synchronize(Device::cuda);
        Tensor next = Tensor::empty({1}, DType::f32, Device::cuda, Tag::workspace);  // an allocation collects them
        CHECK(device_pool_stats().waiting == 0);
    }
    // ZeRO's layouts: the part is a view of the whole (in place), and a separate output
    Tensor whole = x.clone(Device::cuda, Tag::workspace), part = whole.flat(0, M);
    comm->reduce_scatter(whole, part);
    comm->all_gather(part, whole);
    check_close(whole.to_host(), ref, 0, 0, "in-place reduce_scatter / all_gather");
    Tensor out = Tensor::zeros({M}, DType::f32, Device::cuda, Tag::workspace);
    comm->all_gather(x, out);
    check_close(out.to_host(), ref, 0, 0, "all_gather");
    comm->broadcast(out, 0);
    check_close(out.to_host(), ref, 0, 0, "broadcast");

    // send to self, then receive: both go out as one group when the receive is waited on
    Tensor got = Tensor::zeros({M}, DType::f32, Device::cuda, Tag::workspace);
    comm->reset_counters();
    CommHandle s = comm->send_async(x, 0);
    comm->recv(got, 0);
    s.wait();
    check_close(got.to_host(), ref, 0, 0, "send/recv to self");
    CHECK(comm->counters().calls[(int)CommOp::send] == 1);
    CHECK(comm->counters().bytes[(int)CommOp::send] == 4.0 * M);
    Tensor a2a = Tensor::zeros({M}, DType::f32, Device::cuda, Tag::workspace);
    comm->all_to_all(x, a2a);
    check_close(a2a.to_host(), ref, 0, 0, "all_to_all");
    // fp8 moves as bytes, and does not reduce
    Tensor f8 = Tensor::empty({M}, DType::e4m3, Device::cuda, Tag::workspace),
           g8 = Tensor::zeros({M}, DType::e4m3, Device::cuda, Tag::workspace);
    convert(f8, x);
    comm->all_gather(f8, g8);
    check_close(g8.to_host(), f8.to_host(), 0, 0, "all_gather of e4m3");
    CHECK(contains(error_of([&] { comm->all_reduce(f8); }), "NCCL reduces f32, bf16, f16 or i32, not e4m3"));
    Tensor host = random_tensor({4}, 1);
    CHECK(contains(error_of([&] { comm->all_reduce(host); }), "moves GPU tensors only"));

    comm->barrier();
    CHECK(comm->all_reduce_scalar(2.5) == 2.5);
    CHECK(comm->all_reduce_scalar(-1.0, ReduceOp::max) == -1.0);
    auto sub = comm->split(0, 0, "sub");
    CHECK(sub->size() == 1);
    CHECK(sub->backend() == CommBackend::nccl);
    Tensor z = x.clone(Device::cuda, Tag::workspace);
    CommHandle late = sub->all_reduce_async(z);
    sub.reset();  // a handle may outlive its Comm
    late.wait();
    check_close(z.to_host(), ref, 0, 0, "all_reduce on a split communicator");
#endif
}

}  // TEST_SUITE
