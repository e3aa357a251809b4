// tensor.hpp — Tensor = {shape, dtype, device, data}, and the tagged allocator that counts every byte.
//
// Playbook: "Memory usage in Transformers" — weights, gradients, optimizer states and activations are the
// four things that fill a device. Every allocation here carries one of those tags (plus master weights,
// communication buffers and workspace), and the allocator keeps current and peak bytes per tag and
// device, so a program can print what it really used beside what formulas.hpp predicts.
//
// Tensors are always contiguous and row-major. view() and slice() are cheap: they share the buffer.
// Tested by tests/00_common/test_core.cpp (`make test CH=00`).
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "core.hpp"
#include "device_pool.hpp"

namespace penta {

enum class Device : uint8_t { cpu, cuda };
// offloaded: activations moved to host memory between a layer's forward and its backward (--recompute offload)
enum class Tag : uint8_t { params, grads, master, optim, activations, comm, workspace, offloaded };
constexpr int kNumTags = 8;
const char* tag_name(Tag t);
const char* device_name(Device d);

// ---------------------------------------------------------------------------------------------------
// the tagged allocator

struct MemStats {
    int64_t current[kNumTags] = {};
    int64_t peak[kNumTags] = {};
    int64_t total_current = 0;
    int64_t total_peak = 0;
};
const MemStats& mem_stats(Device d);
void mem_reset_peak(Device d);  // peak := current, per tag and in total (and the device pool's peaks)
bool cuda_available();          // built with CUDA and a device is visible
// Freed host blocks the allocator keeps for reuse (at most 1 GiB): free as far as the tags are concerned,
// but still part of the process's memory, so memory_table shows them on a line of their own.
int64_t host_cached_bytes();
// Device memory comes from a stream-ordered caching pool (device_pool.hpp): what it holds from the GPU
// (reserved: the tensors' blocks rounded to size classes, plus freed blocks kept for reuse), current and
// peak — what nvidia-smi shows — beside MemStats' per-tag tensor bytes. Zeros in a build without CUDA.
DevicePoolStats device_pool_stats();

// One allocation. Freed (and un-counted) when the last Tensor that shares it goes away.
struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
    Device device = Device::cpu;
    Tag tag = Tag::workspace;
    Buffer(size_t bytes, Device device, Tag tag);
    ~Buffer();
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
};

// Moves a buffer's bytes to another device and tag in place: every Tensor that shares it (views, slices)
// follows, and the counts move from the old tag to the new one. Activation offload's primitive.
void relocate(const std::shared_ptr<Buffer>& b, Device to, Tag tag);

// While one is alive, every buffer allocated with Tag::activations on this thread is recorded: the model
// learns which buffers a layer's forward kept without each core listing its tensors. Captures nest.
class ActivationCapture {
   public:
    explicit ActivationCapture(std::vector<std::weak_ptr<Buffer>>& into);
    ~ActivationCapture();
    ActivationCapture(const ActivationCapture&) = delete;
    ActivationCapture& operator=(const ActivationCapture&) = delete;

   private:
    std::vector<std::weak_ptr<Buffer>>* prev_;
};

// ---------------------------------------------------------------------------------------------------
// Tensor

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "(2, 3, 4)"

struct Tensor {
    std::shared_ptr<Buffer> buf;
    size_t offset = 0;  // bytes into buf
    Shape shape;
    DType dtype = DType::f32;

    static Tensor empty(const Shape& shape, DType dtype, Device device, Tag tag);
    static Tensor zeros(const Shape& shape, DType dtype, Device device, Tag tag);
    // host values -> a new tensor (converted to dtype when it is f32/bf16/f16/e4m3/e5m2)
    static Tensor from_host(const std::vector<float>& values, const Shape& shape, Device device,
                            Tag tag = Tag::workspace, DType dtype = DType::f32);
    static Tensor from_host_i32(const std::vector<int32_t>& values, const Shape& shape, Device device,
                                Tag tag = Tag::workspace);

    bool defined() const { return buf != nullptr; }
    Device device() const { return buf->device; }
    Tag tag() const { return buf->tag; }
    int dim() const { return (int)shape.size(); }
    int64_t size(int d) const { return shape.at(d < 0 ? d + dim() : d); }
    int64_t numel() const;
    size_t nbytes() const { return (size_t)numel() * dtype_size(dtype); }
    void* data() const { return (char*)buf->ptr + offset; }
    template <class T>
    T* ptr() const;  // typed pointer; checks that T matches dtype (float, int32_t, uint16_t, uint8_t)

    Tensor view(const Shape& new_shape) const;           // same numel; one dim may be -1
    Tensor slice(int64_t start, int64_t len) const;      // rows [start, start+len) of dim 0
    Tensor flat(int64_t start, int64_t n) const;         // elements [start, start+n) as a 1-D view
    Tensor clone(Device device, Tag tag) const;          // deep copy, possibly to another device
    std::vector<float> to_host() const;                  // any float dtype or i32 -> host floats
    std::vector<int32_t> to_host_i32() const;
};

}  // namespace penta
