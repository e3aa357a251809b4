// offload.cpp — activation offloading's two moves (see offload.hpp).
#include "offload.hpp"

#include <chrono>

namespace penta {

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void move_all(const std::vector<std::weak_ptr<Buffer>>& bufs, Device to, Tag tag, int64_t& bytes, int64_t* count,
              double& seconds) {
    const double t0 = now();
    for (const auto& w : bufs)
        if (auto b = w.lock()) {
            if (b->device == to && b->tag == tag) continue;
            relocate(b, to, tag);
            bytes += (int64_t)b->bytes;
            if (count) ++*count;
        }
    seconds += now() - t0;
}
}  // namespace

void offload_to_host(const std::vector<std::weak_ptr<Buffer>>& bufs, OffloadStats& stats) {
    move_all(bufs, Device::cpu, Tag::offloaded, stats.bytes_to_host, &stats.buffers, stats.seconds);
}

void restore_to_device(const std::vector<std::weak_ptr<Buffer>>& bufs, Device device, OffloadStats& stats) {
    move_all(bufs, device, Tag::activations, stats.bytes_to_device, nullptr, stats.seconds);
}

int64_t kept_activation_bytes(Device device) {
    return mem_stats(device).current[(int)Tag::activations] + mem_stats(Device::cpu).current[(int)Tag::offloaded];
}

}  // namespace penta
