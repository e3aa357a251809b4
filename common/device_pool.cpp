// device_pool.cpp — the caching allocator's bookkeeping (device_pool.hpp). The CUDA calls are in
// cuda/memory.cu; tests/00_common/test_device_pool.cpp drives this with a fake device.
#include "device_pool.hpp"

#include <algorithm>

#include "core.hpp"

namespace penta {

namespace {
constexpr size_t kSmallLimit = size_t(1) << 20;    // up to here: multiples of kSmallStep
constexpr size_t kSmallStep = 512;
constexpr size_t kLargeLimit = size_t(256) << 20;  // above here: multiples of kHugeStep
constexpr size_t kHugeStep = size_t(2) << 20;

size_t round_up(size_t n, size_t step) { return (n + step - 1) / step * step; }
}  // namespace

size_t DevicePool::size_class(size_t bytes) {
    if (bytes <= kSmallLimit) return round_up(std::max<size_t>(bytes, 1), kSmallStep);
    if (bytes > kLargeLimit) return bytes > SIZE_MAX - kHugeStep ? bytes : round_up(bytes, kHugeStep);
    size_t pow2 = kSmallLimit;  // the largest power of two <= bytes
    while (pow2 * 2 <= bytes) pow2 *= 2;
    return round_up(bytes, pow2 / 8);
}

DevicePool::Block& DevicePool::block(void* p, const char* what) {
    auto it = blocks_.find(p);
    CHECK(it != blocks_.end() && it->second.in_use, "device pool: %s of %p, which is not a block handed out", what, p);
    return it->second;
}

void* DevicePool::allocate(size_t bytes, StreamId stream) {
    const size_t size = size_class(bytes);
    collect();
    void* p = nullptr;
    auto it = free_.find({stream, size});
    if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        stats_.reuses++;
    } else {
        p = api_.allocate(size);
        if (!p && stats_.cached() > 0) {  // out of memory: hand the cache back, try once more
            empty_cache();
            p = api_.allocate(size);
        }
        if (!p) return nullptr;
        stats_.device_allocs++;
        stats_.reserved += (int64_t)size;
        stats_.reserved_peak = std::max(stats_.reserved_peak, stats_.reserved);
    }
    Block& b = blocks_[p];
    b.size = size;
    b.stream = stream;
    b.also_on.clear();
    b.in_use = true;
    stats_.in_use += (int64_t)size;
    stats_.in_use_peak = std::max(stats_.in_use_peak, stats_.in_use);
    return p;
}

void DevicePool::record_stream(void* p, StreamId s) {
    Block& b = block(p, "record_stream");
    if (s != b.stream && std::find(b.also_on.begin(), b.also_on.end(), s) == b.also_on.end()) b.also_on.push_back(s);
}

void DevicePool::release(void* p) {
    Block& b = block(p, "release");
    b.in_use = false;
    stats_.in_use -= (int64_t)b.size;
    if (b.also_on.empty()) {  // used on its own stream only: what comes next there is ordered after it
        make_free(p, b);
        return;
    }
    Waiting w{p, {}};
    for (StreamId s : b.also_on) w.events.push_back(api_.record_event(s));
    b.also_on.clear();
    waiting_.push_back(std::move(w));
    stats_.waiting++;
}

void DevicePool::forget_stream(StreamId s) {
    for (auto& [p, b] : blocks_) b.also_on.erase(std::remove(b.also_on.begin(), b.also_on.end(), s), b.also_on.end());
}

void DevicePool::make_free(void* p, Block& b) { free_[{b.stream, b.size}].push_back(p); }

void DevicePool::collect() {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
        bool done = true;
        for (void* e : it->events) done = done && api_.event_done(e);
        if (!done) {
            ++it;
            continue;
        }
        for (void* e : it->events) api_.destroy_event(e);
        make_free(it->ptr, blocks_.at(it->ptr));
        stats_.waiting--;
        it = waiting_.erase(it);
    }
}

void DevicePool::empty_cache() {
    if (!waiting_.empty()) {
        api_.synchronize();  // every event has happened now
        collect();
    }
    for (auto& [key, ptrs] : free_) {
        for (void* p : ptrs) {
            api_.release(p);
            stats_.device_frees++;
            stats_.reserved -= (int64_t)key.second;
            blocks_.erase(p);
        }
    }
    free_.clear();
}

DevicePool::BlockInfo DevicePool::info(void* p) const {
    auto it = blocks_.find(p);
    if (it == blocks_.end() || !it->second.in_use) return {};
    return {it->second.size, it->second.stream};
}

}  // namespace penta
