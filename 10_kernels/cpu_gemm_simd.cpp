// cpu_gemm_simd.cpp — the register micro-kernels of the CPU GEMM ladder, in AVX2 and AVX-512 intrinsics.
//
// Playbook: "Diving into the GPUs" — register tiling: an MR x NR tile of C stays in vector registers for the
// whole K loop, so each value of A and B loaded from L1 feeds NR (resp. MR) multiply-adds. Per k step:
//   avx2   6 x 16: 2 loads of B (16 floats), 6 broadcasts of A, 12 FMAs into 12 ymm accumulators
//          (12 + 2 + 1 = 15 of the 16 ymm registers)
//   avx512 14 x 32: 2 loads of B (32 floats), 14 broadcasts of A, 28 FMAs into 28 zmm accumulators
//          (28 + 2 + 1 = 31 of the 32 zmm registers)
// Two FMA units with a 4-cycle latency need >= 8 independent accumulators in flight; both tiles have more.
// The k loop is unrolled by 4 and prefetches B's packed row 8 steps ahead: measured against OpenBLAS in
// interleaved runs on the development machine, +8% for avx2 (0.81-0.85 -> 0.84-0.93), within the noise for avx512.
// Each function carries its own target attribute, so this file compiles on any x86-64 compiler flags and
// the caller picks by CPUID (cpu_rung_unsupported). Packing and edges: cpu_gemm.cpp.
//   build/bin/10_kernels --part cpu-gemm --rungs avx2,avx512
#include <immintrin.h>

#include "cpu_gemm.hpp"

namespace penta::lab {

__attribute__((target("avx2,fma"))) void microkernel_avx2(int64_t kc, const float* Ap, const float* Bp, float* C,
                                                           int64_t ldc, bool accumulate) {
    // Twelve named accumulators rather than an array: with an array GCC 12 also stores every accumulator to
    // the stack at each k step (10 stores per 12 FMAs, measured at 60% of OpenBLAS), with names it does not.
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
           c40 = c00, c41 = c00, c50 = c00, c51 = c00;
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++, Ap += 6, Bp += 16) {
        _mm_prefetch((const char*)(Bp + 8 * 16), _MM_HINT_T0);  // B's row 8 steps ahead (L2 -> L1)
        const __m256 b0 = _mm256_load_ps(Bp), b1 = _mm256_load_ps(Bp + 8);  // (1, 16) of B
        __m256 a = _mm256_broadcast_ss(Ap + 0);
        c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(Ap + 1);
        c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(Ap + 2);
        c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(Ap + 3);
        c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(Ap + 4);
        c40 = _mm256_fmadd_ps(a, b0, c40), c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(Ap + 5);
        c50 = _mm256_fmadd_ps(a, b0, c50), c51 = _mm256_fmadd_ps(a, b1, c51);
    }
    const __m256 rows[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    for (int i = 0; i < 6; i++) {
        float* row = C + i * ldc;
        __m256 lo = rows[i][0], hi = rows[i][1];
        if (accumulate) {
            lo = _mm256_add_ps(lo, _mm256_loadu_ps(row));
            hi = _mm256_add_ps(hi, _mm256_loadu_ps(row + 8));
        }
        _mm256_storeu_ps(row, lo);
        _mm256_storeu_ps(row + 8, hi);
    }
}

__attribute__((target("avx512f"))) void microkernel_avx512(int64_t kc, const float* Ap, const float* Bp, float* C,
                                                            int64_t ldc, bool accumulate) {
    constexpr int MR = 14;
    __m512 c[MR][2];  // an array is fine here: with 32 registers GCC keeps all 28 in them (checked in the disassembly)
    for (int i = 0; i < MR; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        _mm_prefetch((const char*)(Bp + k * 32 + 8 * 32), _MM_HINT_T0);
        const __m512 b0 = _mm512_load_ps(Bp + k * 32), b1 = _mm512_load_ps(Bp + k * 32 + 16);  // (1, 32) of B
        for (int i = 0; i < MR; i++) {
            const __m512 a = _mm512_set1_ps(Ap[k * MR + i]);
            c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
        }
    }
    for (int i = 0; i < MR; i++) {
        float* row = C + i * ldc;
        if (accumulate) {
            c[i][0] = _mm512_add_ps(c[i][0], _mm512_loadu_ps(row));
            c[i][1] = _mm512_add_ps(c[i][1], _mm512_loadu_ps(row + 16));
        }
        _mm512_storeu_ps(row, c[i][0]);
        _mm512_storeu_ps(row + 16, c[i][1]);
    }
}

}  // namespace penta::lab
