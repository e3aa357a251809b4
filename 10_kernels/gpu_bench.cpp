// gpu_bench.cpp — the GPU tables' timing and ceilings (gpu_timing.hpp); in a build without CUDA, the three
// tables of gpu_bench.hpp saying that they cannot run.
//
// Playbook: "Diving into the GPUs".
//   build/bin/10_kernels --part gpu-gemm|fused|attention
#include "gpu_bench.hpp"

#include <cstdio>

#include "lab_util.hpp"

#if defined(PENTA_CUDA)
#include <cuda_runtime_api.h>

#include "../common/core.hpp"
#include "../common/metrics.hpp"
#include "gpu_kernels.hpp"
#include "gpu_timing.hpp"
#endif

namespace penta::lab {

#if !defined(PENTA_CUDA)
static bool no_cuda(const char* part) {
    std::printf("%s: skipped: this build has no CUDA (nvcc was not found at build time)\n", part);
    return false;
}
bool run_gpu_gemm_bench(const GpuBenchOptions&) { return no_cuda("GPU GEMM ladder"); }
bool run_fused_bench(const GpuBenchOptions&) { return no_cuda("fused kernels"); }
bool run_attention_bench(const GpuBenchOptions&) { return no_cuda("flash attention"); }
#else

namespace {

// ms per call of `inner` calls between two events
double event_ms(const std::function<void()>& f, int64_t inner) {
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    CUDA_CHECK(cudaEventRecord(a, 0));
    for (int64_t i = 0; i < inner; i++) f();
    CUDA_CHECK(cudaEventRecord(b, 0));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    return ms / (double)inner;
}

}  // namespace

void time_interleaved(std::vector<Candidate>& c, int64_t reps) {
    for (Candidate& x : c) {
        x.run();  // first call: module load, handles, workspace
        CUDA_CHECK(cudaDeviceSynchronize());
        const double once = event_ms(x.run, 1);
        x.inner = std::max<int64_t>(1, (int64_t)(20.0 / std::max(once, 1e-3)));
        x.ms.clear();
    }
    for (int64_t r = 0; r < reps; r++)
        for (Candidate& x : c) x.ms.push_back(event_ms(x.run, x.inner));
}

double median_ms(const Candidate& c) { return median(c.ms); }

double copy_bandwidth_gbs() {
    static double gbs = 0;
    if (gbs > 0) return gbs;
    const size_t bytes = 2ull << 30;
    void *a = nullptr, *b = nullptr;
    CUDA_CHECK(cudaMalloc(&a, bytes));
    CUDA_CHECK(cudaMalloc(&b, bytes));
    CUDA_CHECK(cudaMemset(a, 1, bytes));
    std::vector<double> ms;
    for (int i = 0; i < 11; i++)
        ms.push_back(event_ms([&] { CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0)); }, 1));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    gbs = 2.0 * (double)bytes / (median(std::vector<double>(ms.begin() + 1, ms.end())) * 1e-3) * 1e-9;
    return gbs;
}

std::string device_name() {
    int dev = 0;
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    return p.name;
}

std::string gpu_header() {
    int dev = 0, sms = 0, driver = 0, runtime = 0;
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    return strfmt("%s (sm_%d, %d SMs, %.0f GB, L2 %d MB), CUDA driver %d.%d, runtime %d.%d, %s", p.name,
                  device_capability(), sms, (double)p.totalGlobalMem / 1e9, p.l2CacheSize >> 20, driver / 1000,
                  driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, today().c_str());
}
#endif

}  // namespace penta::lab
