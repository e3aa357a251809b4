// test_device_pool.cpp — the caching allocator's bookkeeping (common/device_pool.hpp) on a fake device:
// size classes, reuse on the same stream at once, the cross-stream rule (a block used on another stream
// waits for that stream's event), per-stream free lists, peak accounting, and out-of-memory handing the
// cache back. The CUDA calls around it (cuda/memory.cu) run in the CUDA tests on a GPU.
//   build/bin/tests_00 -ts='ch00 np1' -tc='*device pool*'
#include <map>

#include "../../common/device_pool.hpp"
#include "../testing.hpp"

using namespace penta;
using penta::testing::error_of;

namespace {

// A device with `capacity` bytes whose events happen when the test says their stream has caught up.
struct FakeDevice : DeviceMemoryApi {
    size_t capacity = size_t(1) << 40, used = 0;
    uintptr_t next_address = 0x10000;
    std::map<void*, size_t> live;
    struct Event {
        StreamId stream;
        bool done = false;
    };
    std::map<void*, Event> events;
    uintptr_t next_event = 0x1000;
    int syncs = 0;

    void* allocate(size_t bytes) override {
        if (used + bytes > capacity) return nullptr;
        void* p = (void*)next_address;
        next_address += bytes + 4096;
        live[p] = bytes;
        used += bytes;
        return p;
    }
    void release(void* p) override {
        REQUIRE(live.count(p));
        used -= live[p];
        live.erase(p);
    }
    void* record_event(StreamId s) override {
        void* e = (void*)++next_event;
        events[e] = {s, false};
        return e;
    }
    bool event_done(void* e) override { return events.at(e).done; }
    void destroy_event(void* e) override { events.erase(e); }
    void synchronize() override {
        syncs++;
        for (auto& [e, ev] : events) ev.done = true;
    }
    // stream s has run everything queued on it so far
    void catch_up(StreamId s) {
        for (auto& [e, ev] : events)
            if (ev.stream == s) ev.done = true;
    }
};

constexpr StreamId kCompute = 0, kComm = 7;
constexpr size_t MiB = size_t(1) << 20;

}  // namespace

TEST_SUITE("ch00 np1") {

TEST_CASE("device pool: size classes round up by at most 512 bytes, then 12.5%, then 2 MiB") {
    CHECK(DevicePool::size_class(0) == 512);
    CHECK(DevicePool::size_class(1) == 512);
    CHECK(DevicePool::size_class(512) == 512);
    CHECK(DevicePool::size_class(513) == 1024);
    CHECK(DevicePool::size_class(MiB) == MiB);
    CHECK(DevicePool::size_class(MiB + 1) == MiB + MiB / 8);
    CHECK(DevicePool::size_class(3 * MiB) == 3 * MiB);            // 2 MiB · 1.5: a class of its own
    CHECK(DevicePool::size_class(3 * MiB + 1) == 3 * MiB + MiB / 4);  // the next eighth of 2 MiB
    CHECK(DevicePool::size_class(256 * MiB) == 256 * MiB);
    CHECK(DevicePool::size_class(256 * MiB + 1) == 258 * MiB);
    CHECK(DevicePool::size_class(5000 * MiB + 3) == 5002 * MiB);
    // every class holds its request, wastes at most the bound, and is its own class (rounding is idempotent)
    for (size_t n = 1; n < (size_t(1) << 31); n = n * 3 / 2 + 1) {
        const size_t c = DevicePool::size_class(n);
        CAPTURE(n);
        CHECK(c >= n);
        CHECK(DevicePool::size_class(c) == c);
        if (n <= MiB) CHECK(c - n < 512);
        else if (n <= 256 * MiB) CHECK((double)(c - n) <= n / 8.0);
        else CHECK(c - n < 2 * MiB);
        CHECK(DevicePool::size_class(n + 1) >= c);  // monotonic
    }
}

TEST_CASE("device pool: a block freed on its stream serves the next request of its class at once") {
    FakeDevice dev;
    DevicePool pool(dev);
    void* a = pool.allocate(1000, kCompute);
    CHECK(pool.info(a).size == 1024);
    pool.release(a);
    CHECK(pool.stats().in_use == 0);
    CHECK(pool.stats().reserved == 1024);
    CHECK(pool.allocate(900, kCompute) == a);  // same class: the same block, no new device call
    CHECK(pool.stats().device_allocs == 1);
    CHECK(pool.stats().reuses == 1);
    void* b = pool.allocate(5000, kCompute);  // another class: a new block
    CHECK(b != a);
    CHECK(pool.stats().device_allocs == 2);
    // free lists are per stream: a block freed on compute does not serve the comm stream
    pool.release(a);
    void* c = pool.allocate(1000, kComm);
    CHECK(c != a);
    CHECK(pool.info(c).stream == kComm);
    pool.release(c);
    CHECK(pool.allocate(1000, kComm) == c);
    CHECK(error_of([&] { pool.release(a); }).find("not a block handed out") != std::string::npos);  // a is free
}

TEST_CASE("device pool: a block used on another stream is reused only after that stream's event") {
    FakeDevice dev;
    DevicePool pool(dev);
    void* a = pool.allocate(4096, kCompute);
    pool.record_stream(a, kComm);     // NCCL reads it on the comm stream
    pool.record_stream(a, kComm);     // recorded once
    pool.record_stream(a, kCompute);  // its own stream: nothing to record
    pool.release(a);
    CHECK(dev.events.size() == 1);  // one event, on the comm stream
    CHECK(dev.events.begin()->second.stream == kComm);
    CHECK(pool.stats().waiting == 1);
    void* b = pool.allocate(4096, kCompute);  // comm has not caught up: a must not be handed out
    CHECK(b != a);
    dev.catch_up(kCompute);  // compute catching up is not enough
    void* c = pool.allocate(4096, kCompute);
    CHECK(c != a);
    dev.catch_up(kComm);
    void* d = pool.allocate(4096, kCompute);  // now it is
    CHECK(d == a);
    CHECK(pool.stats().waiting == 0);
    CHECK(dev.events.empty());  // the event was destroyed once it had served
    // a block handed out again starts with no other streams: its next release is immediate
    pool.release(d);
    CHECK(pool.stats().waiting == 0);
    CHECK(pool.allocate(4096, kCompute) == a);
    for (void* p : {b, c}) pool.release(p);
}

TEST_CASE("device pool: the host staging rule (the host writes, a stream copies)") {
    // cuda/memory.cu's pinned staging: blocks handed to the host (a stream of its own), each copy's stream
    // recorded; the host may rewrite a block only once the copy that read it has happened
    const StreamId kHost = ~StreamId(0);
    FakeDevice dev;
    DevicePool pinned(dev);
    void* s1 = pinned.allocate(256, kHost);
    pinned.record_stream(s1, kCompute);
    pinned.release(s1);
    void* s2 = pinned.allocate(256, kHost);  // the first copy may not have run: another block
    CHECK(s2 != s1);
    pinned.record_stream(s2, kCompute);
    pinned.release(s2);
    dev.catch_up(kCompute);
    void* s3 = pinned.allocate(256, kHost);
    CHECK((s3 == s1 || s3 == s2));
    CHECK(pinned.stats().device_allocs == 2);  // steady state: two blocks in turn, no more
}

TEST_CASE("device pool: a stream about to be destroyed is forgotten by the blocks that recorded it") {
    FakeDevice dev;
    DevicePool pool(dev);
    void* a = pool.allocate(4096, kCompute);
    pool.record_stream(a, kComm);
    pool.forget_stream(kComm);  // the comm stream's work is over and it goes
    pool.release(a);
    CHECK(dev.events.empty());  // no event on a stream that no longer exists
    CHECK(pool.allocate(4096, kCompute) == a);
}

TEST_CASE("device pool: peak accounting of bytes in use and bytes held from the device") {
    FakeDevice dev;
    DevicePool pool(dev);
    void* a = pool.allocate(3 * MiB, kCompute);
    void* b = pool.allocate(512, kCompute);
    CHECK(pool.stats().in_use == (int64_t)(3 * MiB + 512));
    CHECK(pool.stats().in_use_peak == (int64_t)(3 * MiB + 512));
    pool.release(a);
    CHECK(pool.stats().in_use == 512);
    CHECK(pool.stats().in_use_peak == (int64_t)(3 * MiB + 512));  // the peak stays
    CHECK(pool.stats().reserved == (int64_t)(3 * MiB + 512));     // the freed block is kept
    CHECK(pool.stats().cached() == (int64_t)(3 * MiB));
    void* a2 = pool.allocate(3 * MiB, kCompute);  // reused: reserved does not grow
    CHECK(a2 == a);
    CHECK(pool.stats().reserved_peak == (int64_t)(3 * MiB + 512));
    pool.release(a2);
    pool.reset_peak();
    CHECK(pool.stats().in_use_peak == 512);
    CHECK(pool.stats().reserved_peak == (int64_t)(3 * MiB + 512));  // still held
    pool.empty_cache();
    CHECK(pool.stats().reserved == 512);
    CHECK(pool.stats().device_frees == 1);
    CHECK(dev.live.size() == 1);
    pool.release(b);
}

TEST_CASE("device pool: out of memory hands the cache back (after a synchronise) and tries again") {
    FakeDevice dev;
    dev.capacity = 10 * MiB;
    DevicePool pool(dev);
    void* a = pool.allocate(6 * MiB, kCompute);
    REQUIRE(a);
    pool.record_stream(a, kComm);
    pool.release(a);  // cached, and waiting for the comm stream
    void* b = pool.allocate(7 * MiB, kCompute);  // does not fit beside the cached 6 MiB
    REQUIRE(b);
    CHECK(dev.syncs == 1);  // the waiting block went back only after the device was synchronised
    CHECK(pool.stats().device_frees == 1);
    CHECK(pool.stats().reserved == (int64_t)(7 * MiB));
    CHECK(pool.allocate(7 * MiB, kCompute) == nullptr);  // nothing cached to give back: out of memory
    CHECK(pool.stats().in_use == (int64_t)(7 * MiB));
    pool.release(b);
}

}  // TEST_SUITE
