// kernel_times.cpp — the GPU time of every kernel a program runs, summed by kernel name: a CUDA injection
// library (no change to the program). scripts/gpu_bench.sh builds and uses it to print pentatron's top
// kernels beside PyTorch's (torch.profiler), on machines without Nsight Systems.
//
// The CUDA driver loads the library named by CUDA_INJECTION64_PATH when the program initialises CUDA and
// calls InitializeInjection(); that enables CUPTI's kernel activity records (start and end on the GPU's
// clock), which CUPTI hands back in buffers. At exit the totals go to the file PENTA_KERNEL_TIMES (or
// stderr), the largest first: "total ms, calls, mean us, share, name".
//   g++ -shared -fPIC -O2 tools/kernel_times.cpp -I$CUDA_HOME/include -L$CUDA_HOME/lib64 -lcupti
//       -o build-gpu/libkernel_times.so         (one command)
//   CUDA_INJECTION64_PATH=$PWD/build-gpu/libkernel_times.so PENTA_KERNEL_TIMES=/tmp/k.txt build-gpu/bin/01_single_gpu ...
#include <cupti.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

struct Totals {
    double ns = 0;
    long calls = 0;
};
std::map<std::string, Totals>* g_kernels = nullptr;
constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = (uint8_t*)std::aligned_alloc(8, kBufferBytes);
    *size = kBufferBytes;
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const auto* k = (const CUpti_ActivityKernel10*)record;
        Totals& t = (*g_kernels)[k->name ? k->name : "?"];
        t.ns += (double)(k->end - k->start);
        t.calls++;
    }
    std::free(buffer);
}

void report() {
    cuptiActivityFlushAll(1);
    std::vector<std::pair<std::string, Totals>> rows(g_kernels->begin(), g_kernels->end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
    double all = 0;
    for (const auto& r : rows) all += r.second.ns;
    const char* path = std::getenv("PENTA_KERNEL_TIMES");
    FILE* f = path && *path ? std::fopen(path, "w") : stderr;
    if (!f) f = stderr;
    std::fprintf(f, "kernel GPU time: %.1f ms in %zu kernels\n%10s %8s %10s %6s  %s\n", all / 1e6, rows.size(),
                 "total ms", "calls", "mean us", "share", "kernel");
    for (const auto& [name, t] : rows)
        std::fprintf(f, "%10.2f %8ld %10.1f %5.1f%%  %.150s\n", t.ns / 1e6, t.calls, t.ns / 1e3 / t.calls,
                     100 * t.ns / all, name.c_str());
    if (f != stderr) std::fclose(f);
}

}  // namespace

extern "C" int InitializeInjection(void) {
    g_kernels = new std::map<std::string, Totals>;
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        std::fprintf(stderr, "kernel_times: CUPTI would not record kernels\n");
        return 1;
    }
    std::atexit(report);
    return 1;
}
