// cpu_gemm.hpp — the CPU rungs of the GEMM ladder: C = A @ B in f32 on one core, from three loops to a
// register micro-kernel with AVX2 or AVX-512 intrinsics, each rung one idea faster than the last.
//
// Playbook: "Diving into the GPUs – fusing, threading, mixing" — the same ideas as the GPU ladder (locality,
// tiling, reuse from the fastest memory, keeping the arithmetic units fed) on the hardware every reader has:
//   naive    i-j-k, one dot product per element: B is walked down a column (a new cache line per multiply)
//            and the sum is one dependent chain of scalar adds
//   blocked  i-k-j order in cache-sized blocks: the inner loop runs along rows of B and C, so it is
//            contiguous and the compiler vectorises it; the blocks keep B's slab in L2 while C's row is in L1
//   packed   BLIS's five loops: B's panel and A's block are copied into the order the inner kernel reads them
//            (contiguous micro-panels, zero-padded), so every load is sequential and no row crosses a page;
//            the inner kernel is plain C++ over an MR x NR tile of C held in a local array
//   avx2     the same packing; the MR x NR = 6 x 16 tile of C lives in 12 ymm registers, each k step loads
//            two vectors of B, broadcasts six values of A and issues 12 fused multiply-adds
//   avx512   14 x 32 in 28 zmm registers: twice the lanes, so twice the multiply-adds per instruction
// Single-threaded by design (one core's peak is the yardstick; the trainer runs one BLAS thread per rank).
// Layout: row-major A (M, K), B (K, N), C (M, N); C is overwritten. Validated by tests/10_kernels/test_cpu_gemm.cpp;
// timed against OpenBLAS by `build/bin/10_kernels --part cpu-gemm` (scripts/bench_10_kernels.sh, `make bench`).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace penta::lab {

enum class CpuRung : uint8_t { naive, blocked, packed, avx2, avx512 };

struct CpuRungInfo {
    CpuRung rung;
    const char* name;     // "naive", ..., the --rungs spelling
    const char* teaches;  // one line for the tables
};
const std::vector<CpuRungInfo>& cpu_rungs();
const CpuRungInfo& cpu_rung_info(CpuRung r);
CpuRung parse_cpu_rung(const std::string& s);  // throws listing the valid names

// avx2 needs AVX2 + FMA, avx512 needs AVX-512F; the others run anywhere. The reason when not ("" when yes).
std::string cpu_rung_unsupported(CpuRung r);

// The register tile and cache blocks of a packed rung: C is computed MR x NR at a time, over KC-long slices
// of K (B's KC x NR micro-panel stays in L1), A's MC x KC block is packed once per slice (it stays in L2), B's
// KC x NC panel once per (NC, KC) block.
struct Blocking {
    int mr, nr, kc, mc, nc;
};
Blocking cpu_rung_blocking(CpuRung r);  // packed rungs only

void sgemm_cpu(CpuRung r, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C);

// The micro-kernels (cpu_gemm_simd.cpp): C (MR x NR, row stride ldc) = Ap @ Bp over kc steps, or += when
// accumulate. Ap holds kc columns of MR values, Bp kc rows of NR values (the packed micro-panels).
void microkernel_avx2(int64_t kc, const float* Ap, const float* Bp, float* C, int64_t ldc, bool accumulate);
void microkernel_avx512(int64_t kc, const float* Ap, const float* Bp, float* C, int64_t ldc, bool accumulate);

}  // namespace penta::lab
