// gpu_bench.hpp — the GPU half of the kernels lab's driver: the GEMM ladder against cuBLAS/cuBLASLt, the
// fused kernels against their unfused sequences, flash attention against the naive kernel. Each table
// validates first (validate.hpp's bounds), then times with CUDA events (medians of interleaved repeats).
//
// Playbook: "Diving into the GPUs – fusing, threading, mixing".
//   build/bin/10_kernels --part gpu-gemm|fused|attention      (scripts/gpu_lab.sh runs them all on a GPU)
// In a build without CUDA, or with no GPU visible, each part says so and returns false.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace penta::lab {

struct GpuBenchOptions {
    std::vector<int64_t> sizes{1024, 2048, 4096, 8192};  // square GEMMs
    std::string model = "llama3-8b";                      // its layers' GEMM shapes at `tokens` tokens
    int64_t tokens = 4096;
    int64_t reps = 5;
    std::vector<std::string> rungs;  // GPU rung names to run (empty: all this GPU supports)
    int64_t fused_tokens = 8192;     // rows of the fused kernels (hidden and vocab from `model`)
    int64_t attn_batch = 2, attn_seq = 4096;
    std::vector<int64_t> head_dims{64, 128};
    double slow_limit_s = 0.5;  // a rung whose last size took longer per call is not timed at larger ones
};

// Each prints its table; false when it could not run (no CUDA, no GPU), saying why.
bool run_gpu_gemm_bench(const GpuBenchOptions& opt);
bool run_fused_bench(const GpuBenchOptions& opt);
bool run_attention_bench(const GpuBenchOptions& opt);

}  // namespace penta::lab
