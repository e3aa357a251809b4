// elementwise.cu — one thread per element: add, scale, fill, dtype conversion, and initialisation from the
// counter-based RNG.
//
// Playbook: "GPU kernels" (the simplest kernel shape: a grid-stride loop, consecutive threads touching
// consecutive addresses so every warp's load is one coalesced transaction) and "Mixed precision training"
// (bf16 / f16 / fp8 conversions). The conversions use CUDA's own intrinsics — round to nearest even, fp8
// with __NV_SATFINITE saturation — and must agree bit for bit with the host conversions of core.hpp.
// init_normal calls the same rng_normal as the CPU (core.hpp, __host__ __device__), so a tensor gets the
// same values on either device up to the last bits of logf/cosf (DESIGN §5).
// Tested by tests/00_common/test_cuda.cpp (`build/bin/tests_00 -tc='*cuda*'` on a machine with a GPU).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda_util.cuh"

namespace penta::cuda {

namespace {

// out[i] = f(in[i])
template <class In, class Out, class F>
__global__ void map_kernel(const In* in, Out* out, int64_t n, F f) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = f(in[i]);
}

// out[i] = f(a[i], b[i]); out may alias a or b: each element is read before it is written, by one thread
template <class F>
__global__ void zip_kernel(const float* a, const float* b, float* out, int64_t n, F f) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = f(a[i], b[i]);
}

template <class In, class Out, class F>
void map(const In* in, Out* out, int64_t n, F f) {
    if (n == 0) return;
    map_kernel<<<grid_for(n), kThreads>>>(in, out, n, f);
    KERNEL_CHECK();
}

template <class F>
void zip(const float* a, const float* b, float* out, int64_t n, F f) {
    if (n == 0) return;
    zip_kernel<<<grid_for(n), kThreads>>>(a, b, out, n, f);
    KERNEL_CHECK();
}

struct Add {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct AddScaled {
    float alpha;
    __device__ float operator()(float a, float b) const { return a + alpha * b; }
};
struct Scale {
    float s;
    __device__ float operator()(float x) const { return x * s; }
};

// dtype conversions; the narrow side is carried as its raw bits (uint16_t / uint8_t), as in Tensor
struct ToBF16 {
    __device__ uint16_t operator()(float x) const { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};
struct FromBF16 {
    __device__ float operator()(uint16_t h) const { return __bfloat162float(__ushort_as_bfloat16(h)); }
};
struct ToF16 {
    __device__ uint16_t operator()(float x) const { return __half_as_ushort(__float2half_rn(x)); }
};
struct FromF16 {
    __device__ float operator()(uint16_t h) const { return __half2float(__ushort_as_half(h)); }
};
// fp8 -> f32 goes through f16, which holds every e4m3 and e5m2 value exactly
template <__nv_fp8_interpretation_t kFormat>
struct ToFP8 {
    __device__ uint8_t operator()(float x) const { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kFormat); }
};
template <__nv_fp8_interpretation_t kFormat>
struct FromFP8 {
    __device__ float operator()(uint8_t b) const { return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, kFormat))); }
};

template <class T>
__global__ void fill_kernel(T* x, T value, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = value;
}

template <class T>
void fill_bits(void* x, T value, int64_t n) {
    if (n == 0) return;
    fill_kernel<<<grid_for(n), kThreads>>>((T*)x, value, n);
    KERNEL_CHECK();
}

// element e of a (rows, cols) shard is element (row0 + r, col0 + c) of the full (?, full_cols) tensor
__global__ void init_normal_kernel(float* x, int64_t n, int64_t cols, uint64_t seed, uint64_t stream, float std,
                                   int64_t row0, int64_t col0, int64_t full_cols) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / cols, c = e % cols;
        x[e] = std * rng_normal(seed, stream, (uint64_t)((row0 + r) * full_cols + col0 + c));
    }
}

}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) {
    zip(a.ptr<float>(), b.ptr<float>(), out.ptr<float>(), out.numel(), Add{});
}

void add_inplace(Tensor& dst, const Tensor& src, float alpha) {
    zip(dst.ptr<float>(), src.ptr<float>(), dst.ptr<float>(), dst.numel(), AddScaled{alpha});
}

void scale_inplace(Tensor& x, float s) { map(x.ptr<float>(), x.ptr<float>(), x.numel(), Scale{s}); }

// The value is encoded once on the host with core.hpp's conversions, so every dtype gets exactly the bits
// the CPU backend would write; the kernel only replicates them.
void fill(Tensor& x, float value) {
    const int64_t n = x.numel();
    switch (x.dtype) {
        case DType::f32: fill_bits<float>(x.data(), value, n); break;
        case DType::i32: fill_bits<int32_t>(x.data(), (int32_t)value, n); break;
        case DType::bf16: fill_bits<uint16_t>(x.data(), f32_to_bf16(value), n); break;
        case DType::f16: fill_bits<uint16_t>(x.data(), f32_to_f16(value), n); break;
        case DType::e4m3: fill_bits<uint8_t>(x.data(), f32_to_e4m3(value), n); break;
        case DType::e5m2: fill_bits<uint8_t>(x.data(), f32_to_e5m2(value), n); break;
    }
}

void convert(Tensor& dst, const Tensor& src) {
    const int64_t n = dst.numel();
    if (src.dtype == DType::f32) {
        const float* in = src.ptr<float>();
        switch (dst.dtype) {
            case DType::f32: memcpy_any(dst.data(), in, src.nbytes()); break;
            case DType::bf16: map(in, dst.ptr<uint16_t>(), n, ToBF16{}); break;
            case DType::f16: map(in, dst.ptr<uint16_t>(), n, ToF16{}); break;
            case DType::e4m3: map(in, dst.ptr<uint8_t>(), n, ToFP8<__NV_E4M3>{}); break;
            case DType::e5m2: map(in, dst.ptr<uint8_t>(), n, ToFP8<__NV_E5M2>{}); break;
            case DType::i32: FAIL("convert: f32 -> i32 is not a float conversion");
        }
        return;
    }
    CHECK(dst.dtype == DType::f32, "convert: %s -> %s; one side must be f32", dtype_name(src.dtype),
          dtype_name(dst.dtype));
    float* out = dst.ptr<float>();
    switch (src.dtype) {
        case DType::bf16: map(src.ptr<uint16_t>(), out, n, FromBF16{}); break;
        case DType::f16: map(src.ptr<uint16_t>(), out, n, FromF16{}); break;
        case DType::e4m3: map(src.ptr<uint8_t>(), out, n, FromFP8<__NV_E4M3>{}); break;
        case DType::e5m2: map(src.ptr<uint8_t>(), out, n, FromFP8<__NV_E5M2>{}); break;
        case DType::f32: case DType::i32: FAIL("convert: unexpected source dtype %s", dtype_name(src.dtype));
    }
}

void init_normal(Tensor& x, uint64_t seed, uint64_t stream, float std, int64_t row0, int64_t col0,
                 int64_t full_cols) {
    const int64_t n = x.numel(), cols = x.dim() ? x.size(-1) : 1, ld = full_cols < 0 ? cols : full_cols;
    CHECK(col0 + cols <= ld, "init_normal: columns [%ld, %ld) exceed full_cols %ld", (long)col0, (long)(col0 + cols),
          (long)ld);
    if (n == 0) return;
    init_normal_kernel<<<grid_for(n), kThreads>>>(x.ptr<float>(), n, cols, seed, stream, std, row0, col0, ld);
    KERNEL_CHECK();
}

}  // namespace penta::cuda
