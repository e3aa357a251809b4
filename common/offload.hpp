// offload.hpp — activation offloading: a layer's saved activations move to host memory after its forward
// and come back just before its backward (`--recompute offload`), so the device holds about one layer's
// activations at a time, without recomputing anything.
//
// Playbook: "Activation recomputation" names offloading as the other way to trade for activation memory —
// it pays in transfer bytes over PCIe instead of FLOPs, and pays off when the copies overlap compute. Here the
// copies are synchronous (the point is the bytes and where they live); on CPU ranks "host" and "device" are
// the same memory, so what is measured there is the bytes moved and the device-side peak the tags show
// (Tag::activations falls to one layer, Tag::offloaded holds the rest). Used by common/model.cpp.
// Test: `make test CH=01` (tests/01_single_gpu/test_offload.cpp: bitwise the same training as none, the
// bytes moved and both peaks against llama_layer_activation_bytes).
#pragma once
#include <memory>
#include <vector>

#include "tensor.hpp"

namespace penta {

struct OffloadStats {
    int64_t bytes_to_host = 0, bytes_to_device = 0;  // since the model was built
    int64_t buffers = 0;                              // moves to host
    double seconds = 0;                               // spent in the copies, both ways
};

// A layer's buffers: moved to the host (Tag::offloaded) and back to `device` (Tag::activations). Buffers
// that died meanwhile (transients the forward freed) are skipped.
void offload_to_host(const std::vector<std::weak_ptr<Buffer>>& bufs, OffloadStats& stats);
void restore_to_device(const std::vector<std::weak_ptr<Buffer>>& bufs, Device device, OffloadStats& stats);

// What the forward passes keep for their backward, wherever it is: Tag::activations on `device` plus what
// offload parked on the host. The schedules measure "what a forward kept" with it.
int64_t kept_activation_bytes(Device device);

}  // namespace penta
