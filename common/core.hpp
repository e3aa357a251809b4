// core.hpp — the floor every pentatron file stands on.
//
// - CHECK / CUDA_CHECK / NCCL_CHECK / MPI_CHECK: a failed check throws penta::Error whose message names
//   the file, the line and the rank; run_main() (runtime.hpp) turns an uncaught one into a job abort.
// - dtypes (f32, bf16, f16, fp8 e4m3 / e5m2, i32) and their host conversions: round-to-nearest-even, with
//   the saturation rules of the OCP 8-bit floating point spec (playbook: "Mixed precision training").
// - a counter-based RNG (Philox-4x32-10): a value depends only on (seed, stream, element index), so a
//   tensor shard initialises to exactly the slice of the full tensor (ARCHITECTURE.md §6).
//
// Header-only apart from dtype.cpp and runtime.cpp. Tested by tests/00_common/test_core.cpp (`make test CH=00`).
#pragma once
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define PENTA_HD __host__ __device__ __forceinline__
#else
#define PENTA_HD inline
#endif

namespace penta {

// ---------------------------------------------------------------------------------------------------
// errors

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

int world_rank();  // this process's rank in the job (0 without MPI); defined in runtime.cpp

inline std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string strfmt(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char buf[1024];
    int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < (int)sizeof buf) return std::string(buf, n > 0 ? n : 0);
    std::string s(n + 1, '\0');
    va_start(ap, fmt);
    std::vsnprintf(&s[0], s.size(), fmt, ap);
    va_end(ap);
    s.resize(n);
    return s;
}

[[noreturn]] inline void fail_at(const char* file, int line, const std::string& msg) {
    throw Error(strfmt("[rank %d] %s:%d: %s", world_rank(), file, line, msg.c_str()));
}

}  // namespace penta

// CHECK(cond) or CHECK(cond, "printf format", args...): the message should name the value and the rule.
#define CHECK(cond, ...)                                                                               \
    do {                                                                                               \
        if (!(cond))                                                                                   \
            ::penta::fail_at(__FILE__, __LINE__,                                                       \
                             std::string("check failed (" #cond ") ") + ::penta::strfmt("" __VA_ARGS__)); \
    } while (0)

// FAIL("format", args...): an error that is not a failed condition (bad flag, bad file).
#define FAIL(...) ::penta::fail_at(__FILE__, __LINE__, ::penta::strfmt(__VA_ARGS__))

#if defined(PENTA_CUDA)
#include <cuda_runtime_api.h>
#define CUDA_CHECK(call)                                                                          \
    do {                                                                                          \
        cudaError_t err_ = (call);                                                                \
        if (err_ != cudaSuccess)                                                                  \
            ::penta::fail_at(__FILE__, __LINE__,                                                  \
                             std::string(#call " failed: ") + cudaGetErrorString(err_));          \
    } while (0)
#endif
#if defined(PENTA_NCCL)
#include <nccl.h>
#define NCCL_CHECK(call)                                                                          \
    do {                                                                                          \
        ncclResult_t r_ = (call);                                                                 \
        if (r_ != ncclSuccess)                                                                    \
            ::penta::fail_at(__FILE__, __LINE__, std::string(#call " failed: ") + ncclGetErrorString(r_)); \
    } while (0)
#endif
#if defined(PENTA_MPI)
#include <mpi.h>
#define MPI_CHECK(call)                                                                           \
    do {                                                                                          \
        int r_ = (call);                                                                          \
        if (r_ != MPI_SUCCESS) {                                                                  \
            char s_[MPI_MAX_ERROR_STRING];                                                        \
            int n_ = 0;                                                                           \
            MPI_Error_string(r_, s_, &n_);                                                        \
            ::penta::fail_at(__FILE__, __LINE__, std::string(#call " failed: ") + std::string(s_, n_)); \
        }                                                                                         \
    } while (0)
#endif

namespace penta {

// ---------------------------------------------------------------------------------------------------
// dtypes

enum class DType : uint8_t { f32, bf16, f16, e4m3, e5m2, i32 };

inline size_t dtype_size(DType t) {
    switch (t) {
        case DType::f32: case DType::i32: return 4;
        case DType::bf16: case DType::f16: return 2;
        case DType::e4m3: case DType::e5m2: return 1;
    }
    return 0;
}
const char* dtype_name(DType t);  // "f32", "bf16", ...

// Host conversions (dtype.cpp). All round to nearest, ties to even. NaN stays NaN.
uint16_t f32_to_bf16(float x);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_f16(float x);  // overflow -> ±inf, tiny values -> f16 subnormals or ±0
float f16_to_f32(uint16_t h);
// FP8 (OCP spec). e4m3: no infinities, S.1111.111 is NaN, max finite 448. e5m2: IEEE-like, max 57344.
// saturate=true: out-of-range finite values and ±inf clamp to ±max finite (e4m3 ±inf -> ±448);
// saturate=false: out-of-range -> NaN for e4m3, ±inf for e5m2.
uint8_t f32_to_e4m3(float x, bool saturate = true);
float e4m3_to_f32(uint8_t b);
uint8_t f32_to_e5m2(float x, bool saturate = true);
float e5m2_to_f32(uint8_t b);
// n f32 values <-> n values of dtype t, each converted as above (fp8 saturates: a scaled tensor should
// never make NaNs); no alignment needed. i32 is refused.
void f32_to_dtype(const float* src, void* dst, DType t, int64_t n);
void dtype_to_f32(const void* src, DType t, float* dst, int64_t n);

// ---------------------------------------------------------------------------------------------------
// counter-based RNG: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
// key = seed, counter = (index, stream). Same inputs, same bits, on any device and any layout.

struct Philox4 {
    uint32_t v[4];
};

PENTA_HD Philox4 philox4x32(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32), c2 = (uint32_t)stream,
             c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return Philox4{{c0, c1, c2, c3}};
}

// uniform in (0, 1): 24 random bits, offset by half a step so log() is always finite
PENTA_HD float u32_to_unit(uint32_t x) { return ((x >> 8) + 0.5f) * (1.0f / 16777216.0f); }

PENTA_HD float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return u32_to_unit(philox4x32(seed, stream, index).v[0]);
}

// standard normal by Box-Muller on two uniforms of the same counter
PENTA_HD float rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    Philox4 r = philox4x32(seed, stream, index);
    float u1 = u32_to_unit(r.v[0]), u2 = u32_to_unit(r.v[1]);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795865f * u2);
}

// stream id of a named tensor: FNV-1a of the name, so "layers.3.attn.wq" always draws the same numbers
inline uint64_t name_stream(const std::string& name) {
    uint64_t h = 14695981039346656037ull;
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
    return h;
}

}  // namespace penta
