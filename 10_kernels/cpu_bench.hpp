// cpu_bench.hpp — the CPU GEMM ladder's table: every rung validated against the fp64 reference, then timed
// against OpenBLAS's single-thread sgemm in interleaved repeats, medians printed beside the load average.
//
// Playbook: "Diving into the GPUs" (the ladder, on the CPU every reader has).
//   build/bin/10_kernels --part cpu-gemm --sizes 512,1024 --model small --tokens 512 --reps 5
// OpenBLAS picks its kernel when it loads (OPENBLAS_CORETYPE overrides): the table names it and compares the
// rung of the same ISA with it (AVX2 rung vs an AVX2 kernel, AVX-512 rung vs an AVX-512 kernel).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cpu_gemm.hpp"

namespace penta::lab {

struct CpuBenchOptions {
    std::vector<int64_t> sizes{1024};  // square M = N = K
    std::string model = "small";       // a preset: its layers' GEMM shapes at `tokens` tokens ("" for none)
    int64_t tokens = 512;              // chapter 01 trains `small` with 16 x 32 tokens per micro-batch
    int64_t reps = 5;                  // interleaved repeats; medians are printed
    std::vector<CpuRung> rungs;        // empty: every rung this CPU runs
    int64_t naive_limit = 1ll << 30;   // the naive rung only for M·N·K up to this (1024^3: ~2 s per call)
};

// The ISA class of the OpenBLAS kernel this process loaded: "avx512", "avx2" or "other", and its name
struct OpenblasKernel {
    std::string core, isa, config;
};
OpenblasKernel openblas_kernel();

// prints the table; returns the ratio (best rung of OpenBLAS's ISA)/OpenBLAS at the first square size
double run_cpu_gemm_bench(const CpuBenchOptions& opt);

}  // namespace penta::lab
