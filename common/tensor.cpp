// tensor.cpp — Tensor and the tagged allocator (see tensor.hpp).
#include "tensor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "ops.hpp"
#include "ops_backend.hpp"

namespace penta {

const char* tag_name(Tag t) {
    static const char* names[kNumTags] = {"params", "grads", "master", "optim", "activations", "comm",
                                          "workspace", "offloaded"};
    return names[(int)t];
}
const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

const char* dtype_name(DType t) {
    switch (t) {
        case DType::f32: return "f32";
        case DType::bf16: return "bf16";
        case DType::f16: return "f16";
        case DType::e4m3: return "e4m3";
        case DType::e5m2: return "e5m2";
        case DType::i32: return "i32";
    }
    return "?";
}

// ---------------------------------------------------------------------------------------------------
// allocator accounting. Ranks are processes, so plain globals are per rank; the programs are
// single-threaded apart from BLAS, which never allocates through here.

namespace {
MemStats g_stats[2];

// Host blocks that tensors have released, kept for the next request of the same size. A training step
// allocates the same shapes in the same order every step, so from the second step on every host tensor is
// a block taken from here. Handing blocks back to the system instead costs more than the malloc call:
// glibc serves big requests with mmap and returns them on free, so each new block is faulted in a page
// at a time on first touch — on the CPU trainer that was ~7% of a step. MemStats counts tensors, not this
// cache: a cached block is free memory as far as the per-tag figures are concerned.
class HostBlockCache {
   public:
    // a block of `bytes` (a multiple of kAlign), or nullptr when the system has no memory left
    void* take(size_t bytes) {
        auto it = free_.find(bytes);
        if (it == free_.end() || it->second.empty()) {
            void* p = fresh(bytes);
            if (!p && cached_ > 0) {  // the system is out of memory: hand the cached blocks back, try again
                trim();
                p = fresh(bytes);
            }
            return p;
        }
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= bytes;
        return p;
    }
    void give(void* p, size_t bytes) {
        if (cached_ + bytes > kMaxCached) {  // a bound, in case a program cycles through many sizes
            std::free(p);
            return;
        }
        free_[bytes].push_back(p);
        cached_ += bytes;
    }
    void trim() {
        for (auto& [size, blocks] : free_)
            for (void* p : blocks) std::free(p);
        free_.clear();
        cached_ = 0;
    }
    static size_t rounded(size_t bytes) { return (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign; }
    size_t cached() const { return cached_; }

   private:
    // 64-byte alignment: whole cache lines, and what AVX-512 loads like. A block of 2 MiB or more (the
    // parameters, gradients, AdamW moments) is also asked to live on 2 MiB pages where the kernel allows it
    // (transparent huge pages in "madvise" mode): GEMM packing and the optimizer walk these buffers, and
    // with 4 KiB pages every 4 KiB of them costs a TLB miss.
    static void* fresh(size_t bytes) {
#if defined(MADV_HUGEPAGE)
        if (bytes >= kHugePage) {
            void* p = std::aligned_alloc(kHugePage, (bytes + kHugePage - 1) / kHugePage * kHugePage);
            if (p) madvise(p, bytes, MADV_HUGEPAGE);  // a hint: failure only means 4 KiB pages
            return p;
        }
#endif
        return std::aligned_alloc(kAlign, bytes);
    }
    static constexpr size_t kAlign = 64;
    static constexpr size_t kHugePage = size_t(2) << 20;
    static constexpr size_t kMaxCached = size_t(1) << 30;
    std::unordered_map<size_t, std::vector<void*>> free_;  // rounded size -> free blocks of that size
    size_t cached_ = 0;
};

// never destroyed: a static Tensor may release its buffer after every other static has gone
HostBlockCache& host_cache() {
    static HostBlockCache* cache = new HostBlockCache;
    return *cache;
}
}  // namespace

const MemStats& mem_stats(Device d) { return g_stats[(int)d]; }

int64_t host_cached_bytes() { return (int64_t)host_cache().cached(); }

void mem_reset_peak(Device d) {
    MemStats& s = g_stats[(int)d];
    for (int i = 0; i < kNumTags; i++) s.peak[i] = s.current[i];
    s.total_peak = s.total_current;
#if defined(PENTA_CUDA)
    if (d == Device::cuda && cuda_available()) cuda::device_pool_reset_peak();
#endif
}

DevicePoolStats device_pool_stats() {
#if defined(PENTA_CUDA)
    if (cuda_available()) return cuda::device_pool_stats();
#endif
    return {};
}

bool cuda_available() {
#if defined(PENTA_CUDA)
    static int n = cuda::device_count();
    return n > 0;
#else
    return false;
#endif
}

namespace {
// which flags set the size of an allocation of tag t, for the out-of-memory message
const char* tag_flags(Tag t) {
    switch (t) {
        case Tag::params:
        case Tag::grads:
        case Tag::master:
        case Tag::optim: return "model state: set by --model, divided by --tp and --zero";
        case Tag::activations: return "set by --micro-batch × --seq and --model; --recompute lowers it";
        case Tag::comm: return "communication buffers: set by the model's size and --bucket-mb";
        case Tag::workspace: return "set by --micro-batch × --seq and --model";
        case Tag::offloaded: return "host copies of activations: --recompute offload, set by --micro-batch × --seq";
    }
    return "";
}
[[noreturn]] void out_of_memory(size_t bytes, Device d, Tag t) {
    // on the GPU the pool has already handed its cached blocks back and tried again
    const std::string pool = d == Device::cpu ? std::string()
                                              : strfmt(" (their blocks, rounded to size classes: %.2f GiB)",
                                                       device_pool_stats().reserved / 1073741824.0);
    FAIL("out of %s memory allocating %zu bytes (%.2f GiB) for %s (%s), with %.2f GiB of tensors already held "
         "on this device%s", d == Device::cpu ? "host" : "GPU", bytes, bytes / 1073741824.0, tag_name(t), tag_flags(t),
         mem_stats(d).total_current / 1073741824.0, pool.c_str());
}
}  // namespace

Buffer::Buffer(size_t nbytes, Device dev, Tag t) : bytes(nbytes), device(dev), tag(t) {
    if (dev == Device::cpu) {
        ptr = host_cache().take(HostBlockCache::rounded(nbytes));
        if (!ptr) out_of_memory(nbytes, dev, t);
    } else {
#if defined(PENTA_CUDA)
        ptr = cuda::device_malloc(nbytes ? nbytes : 1);
        if (!ptr) out_of_memory(nbytes, dev, t);
#else
        FAIL("a cuda tensor was requested, but this build has no CUDA (rebuild with `make CUDA=1`)");
#endif
    }
    MemStats& s = g_stats[(int)dev];
    s.current[(int)t] += (int64_t)nbytes;
    s.total_current += (int64_t)nbytes;
    if (s.current[(int)t] > s.peak[(int)t]) s.peak[(int)t] = s.current[(int)t];
    if (s.total_current > s.total_peak) s.total_peak = s.total_current;
}

Buffer::~Buffer() {
    if (device == Device::cpu) {
        host_cache().give(ptr, HostBlockCache::rounded(bytes));
    } else {
#if defined(PENTA_CUDA)
        cuda::device_free(ptr);
#endif
    }
    MemStats& s = g_stats[(int)device];
    s.current[(int)tag] -= (int64_t)bytes;
    s.total_current -= (int64_t)bytes;
}

// ---------------------------------------------------------------------------------------------------
// Tensor

std::string shape_str(const Shape& s) {
    std::string out = "(";
    for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + ")";
}

int64_t Tensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

namespace {
thread_local std::vector<std::weak_ptr<Buffer>>* g_capture = nullptr;
}

ActivationCapture::ActivationCapture(std::vector<std::weak_ptr<Buffer>>& into) : prev_(g_capture) { g_capture = &into; }
ActivationCapture::~ActivationCapture() { g_capture = prev_; }

void relocate(const std::shared_ptr<Buffer>& b, Device to, Tag tag) {
    if (b->device == to && b->tag == tag) return;
    // a fresh buffer on `to`, the bytes copied into it, then the two swap their memory: `fresh` leaves with the
    // old memory and its destructor frees it and un-counts the old tag
    auto fresh = std::make_shared<Buffer>(b->bytes, to, tag);
    Tensor src, dst;
    src.buf = b, dst.buf = fresh;
    src.dtype = dst.dtype = DType::e4m3;  // one byte per element: a plain byte copy
    src.shape = dst.shape = {(int64_t)b->bytes};
    copy(dst, src);
    std::swap(b->ptr, fresh->ptr);
    std::swap(b->device, fresh->device);
    std::swap(b->tag, fresh->tag);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, Tag tag) {
    Tensor t;
    t.shape = shape;
    t.dtype = dtype;
    for (int64_t d : shape) CHECK(d >= 0, "negative dimension in shape %s", shape_str(shape).c_str());
    t.buf = std::make_shared<Buffer>(t.nbytes(), device, tag);
    if (g_capture && tag == Tag::activations) g_capture->push_back(t.buf);
    return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, Tag tag) {
    Tensor t = empty(shape, dtype, device, tag);
    if (device == Device::cpu) {
        std::memset(t.data(), 0, t.nbytes());
    } else {
#if defined(PENTA_CUDA)
        cuda::memset_zero(t.data(), t.nbytes());
#endif
    }
    return t;
}

template <class T>
static constexpr bool dtype_matches(DType d) {
    if constexpr (std::is_same_v<T, float>) return d == DType::f32;
    if constexpr (std::is_same_v<T, int32_t>) return d == DType::i32;
    if constexpr (std::is_same_v<T, uint16_t>) return d == DType::bf16 || d == DType::f16;
    if constexpr (std::is_same_v<T, uint8_t>) return d == DType::e4m3 || d == DType::e5m2;
    return false;
}

template <class T>
T* Tensor::ptr() const {
    CHECK(defined(), "ptr() of an undefined tensor");
    CHECK(dtype_matches<T>(dtype), "typed access does not match the tensor's dtype %s", dtype_name(dtype));
    // on CPU ranks the host copy is readable memory, so reading it would go unnoticed; on a GPU it is not there
    CHECK(buf->tag != Tag::offloaded,
          "an op reads a %s tensor that --recompute offload parked on the host: its layer's backward restores it first",
          shape_str(shape).c_str());
    return (T*)data();
}
template float* Tensor::ptr<float>() const;
template int32_t* Tensor::ptr<int32_t>() const;
template uint16_t* Tensor::ptr<uint16_t>() const;
template uint8_t* Tensor::ptr<uint8_t>() const;

Tensor Tensor::view(const Shape& new_shape) const {
    Shape s = new_shape;
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == -1) {
            CHECK(infer < 0, "view %s: at most one -1", shape_str(new_shape).c_str());
            infer = (int64_t)i;
        } else {
            known *= s[i];
        }
    }
    if (infer >= 0) s[infer] = known ? numel() / known : 0;
    Tensor t = *this;
    t.shape = s;
    CHECK(t.numel() == numel(), "view %s of a tensor %s changes the element count",
          shape_str(new_shape).c_str(), shape_str(shape).c_str());
    return t;
}

Tensor Tensor::slice(int64_t start, int64_t len) const {
    CHECK(dim() >= 1 && start >= 0 && len >= 0 && start + len <= shape[0],
          "slice [%ld, %ld) of dim 0 of a tensor %s", (long)start, (long)(start + len), shape_str(shape).c_str());
    Tensor t = *this;
    t.shape[0] = len;
    t.offset += (size_t)(start * (numel() / std::max<int64_t>(shape[0], 1))) * dtype_size(dtype);
    return t;
}

Tensor Tensor::flat(int64_t start, int64_t n) const {
    CHECK(start >= 0 && n >= 0 && start + n <= numel(), "flat [%ld, %ld) of a tensor of %ld elements",
          (long)start, (long)(start + n), (long)numel());
    Tensor t = *this;
    t.shape = {n};
    t.offset += (size_t)start * dtype_size(dtype);
    return t;
}

Tensor Tensor::clone(Device device, Tag tag) const {
    Tensor t = empty(shape, dtype, device, tag);
    penta::copy(t, *this);
    return t;
}

std::vector<float> Tensor::to_host() const {
    Tensor h = device() == Device::cpu ? *this : clone(Device::cpu, Tag::workspace);
    std::vector<float> out(numel());
    for (int64_t i = 0; i < numel(); i++) {
        switch (dtype) {
            case DType::f32: out[i] = h.ptr<float>()[i]; break;
            case DType::i32: out[i] = (float)h.ptr<int32_t>()[i]; break;
            case DType::bf16: out[i] = bf16_to_f32(h.ptr<uint16_t>()[i]); break;
            case DType::f16: out[i] = f16_to_f32(h.ptr<uint16_t>()[i]); break;
            case DType::e4m3: out[i] = e4m3_to_f32(h.ptr<uint8_t>()[i]); break;
            case DType::e5m2: out[i] = e5m2_to_f32(h.ptr<uint8_t>()[i]); break;
        }
    }
    return out;
}

std::vector<int32_t> Tensor::to_host_i32() const {
    CHECK(dtype == DType::i32, "to_host_i32 of a %s tensor", dtype_name(dtype));
    Tensor h = device() == Device::cpu ? *this : clone(Device::cpu, Tag::workspace);
    return std::vector<int32_t>(h.ptr<int32_t>(), h.ptr<int32_t>() + numel());
}

Tensor Tensor::from_host(const std::vector<float>& values, const Shape& shape, Device device, Tag tag,
                         DType dtype) {
    Tensor h = empty(shape, DType::f32, Device::cpu, Tag::workspace);
    CHECK((int64_t)values.size() == h.numel(), "from_host: %zu values for shape %s", values.size(),
          shape_str(shape).c_str());
    std::memcpy(h.data(), values.data(), h.nbytes());
    if (dtype != DType::f32) {
        Tensor c = empty(shape, dtype, Device::cpu, Tag::workspace);
        convert(c, h);
        h = c;
    }
    if (device == Device::cpu && tag == Tag::workspace) return h;
    return h.clone(device, tag);
}

Tensor Tensor::from_host_i32(const std::vector<int32_t>& values, const Shape& shape, Device device, Tag tag) {
    Tensor h = empty(shape, DType::i32, Device::cpu, tag);
    CHECK((int64_t)values.size() == h.numel(), "from_host_i32: %zu values for shape %s", values.size(),
          shape_str(shape).c_str());
    std::memcpy(h.data(), values.data(), h.nbytes());
    return device == Device::cpu ? h : h.clone(device, tag);
}

}  // namespace penta
