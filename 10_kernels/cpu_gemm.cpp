// cpu_gemm.cpp — the CPU GEMM ladder's loops: naive, blocked, and the packed driver (BLIS's five loops)
// that the plain, AVX2 and AVX-512 micro-kernels plug into. See cpu_gemm.hpp for what each rung teaches.
//
// Playbook: "Diving into the GPUs" — tiling and reuse, here for L1/L2 and the vector registers.
//   build/bin/10_kernels --part cpu-gemm            (tests: build/bin/tests_10 -tc='*cpu gemm*')
#include "cpu_gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "../common/core.hpp"

namespace penta::lab {

const std::vector<CpuRungInfo>& cpu_rungs() {
    static const std::vector<CpuRungInfo> rungs = {
        {CpuRung::naive, "naive", "i-j-k dot products: B read down a column, one scalar add chain"},
        {CpuRung::blocked, "blocked", "i-k-j in cache blocks: the inner loop is contiguous and vectorises"},
        {CpuRung::packed, "packed", "A and B packed into micro-panels, a plain C++ 6x16 inner kernel"},
        {CpuRung::avx2, "avx2", "6x16 tile of C in 12 ymm registers, FMA intrinsics"},
        {CpuRung::avx512, "avx512", "14x32 tile of C in 28 zmm registers, FMA intrinsics"},
    };
    return rungs;
}

const CpuRungInfo& cpu_rung_info(CpuRung r) {
    for (const auto& i : cpu_rungs())
        if (i.rung == r) return i;
    FAIL("unknown CPU rung %d", (int)r);
}

CpuRung parse_cpu_rung(const std::string& s) {
    std::string valid;
    for (const auto& i : cpu_rungs()) {
        if (s == i.name) return i.rung;
        valid += std::string(valid.empty() ? "" : "|") + i.name;
    }
    FAIL("unknown CPU rung '%s' (valid: %s)", s.c_str(), valid.c_str());
}

std::string cpu_rung_unsupported(CpuRung r) {
    if (r == CpuRung::avx2 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
        return "this CPU has no AVX2+FMA";
    if (r == CpuRung::avx512 && !__builtin_cpu_supports("avx512f")) return "this CPU has no AVX-512F";
    return "";
}

// KC: B's micro-panel (KC x NR floats: 24 KB for avx2, 32 KB for avx512) stays in the 48 KB L1 while the
// ir loop runs over A's block; MC: A's block (MC x KC: 360 KB, 336 KB) stays in the 2 MB L2; NC: B's panel
// in L3. Tried on the development machine (Xeon, 48 KB L1d, 2 MB L2 per core): KC 192-512 and MC 112-960
// were all within the noise of a shared machine, 0.85-0.9 of OpenBLAS's kernel of the same ISA; smaller KC
// or MC lost ~10%. Other machines may want others (exercise 1 in the README).
Blocking cpu_rung_blocking(CpuRung r) {
    switch (r) {
        case CpuRung::packed: return {6, 16, 384, 240, 4096};
        case CpuRung::avx2: return {6, 16, 384, 240, 4096};
        case CpuRung::avx512: return {14, 32, 256, 336, 4096};
        default: FAIL("CPU rung %s is not a packed rung", cpu_rung_info(r).name);
    }
}

namespace {

void sgemm_naive(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = 0;
            for (int64_t k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];  // B[k][j]: stride N
            C[i * N + j] = s;
        }
}

void sgemm_blocked(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
    // EXERCISE 10.1 begin: the cache-blocked rung: C's row block, B's block and the contiguous inner loop the compiler vectorises
    constexpr int64_t NB = 512, KB = 128, MB = 64;  // C's row block 2 KB (L1), B's block 256 KB (L2)
    std::fill(C, C + M * N, 0.0f);
    for (int64_t j0 = 0; j0 < N; j0 += NB)
        for (int64_t k0 = 0; k0 < K; k0 += KB)
            for (int64_t i0 = 0; i0 < M; i0 += MB) {
                const int64_t j1 = std::min(N, j0 + NB), k1 = std::min(K, k0 + KB), i1 = std::min(M, i0 + MB);
                for (int64_t i = i0; i < i1; i++) {
                    float* c = C + i * N;
                    for (int64_t k = k0; k < k1; k++) {
                        const float a = A[i * K + k];
                        const float* b = B + k * N;
                        for (int64_t j = j0; j < j1; j++) c[j] += a * b[j];  // contiguous: vectorised
                    }
                }
            }
    // EXERCISE 10.1 end
}

// The packed rung's inner kernel: the same tile and loop as the AVX2 one, written as plain C++ over an
// array the compiler may keep in registers. GCC 12 at -O3 vectorises the k loop instead (across k steps,
// transposing with shuffles: 0.7 GFLOP/s measured); with loop vectorisation off here it vectorises the
// unrolled 6 x 16 tile, which is the register tiling of the next rung, found by the compiler.
__attribute__((optimize("no-tree-loop-vectorize"))) void microkernel_plain(int64_t kc, const float* __restrict Ap, const float* __restrict Bp, float* __restrict C,
                       int64_t ldc, bool accumulate) {
    constexpr int MR = 6, NR = 16;
    float acc[MR][NR] = {};
    for (int64_t k = 0; k < kc; k++) {
        const float* b = Bp + k * NR;
        for (int i = 0; i < MR; i++) {
            const float a = Ap[k * MR + i];
            for (int j = 0; j < NR; j++) acc[i][j] += a * b[j];
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) C[i * ldc + j] = accumulate ? C[i * ldc + j] + acc[i][j] : acc[i][j];
}

using MicroKernel = void (*)(int64_t, const float*, const float*, float*, int64_t, bool);

struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float[], FreeDeleter>;
AlignedFloats aligned_floats(int64_t n) {
    const size_t bytes = std::max<size_t>(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);  // a multiple of 64
    float* p = (float*)std::aligned_alloc(64, bytes);
    CHECK(p != nullptr, "cannot allocate %zu bytes for a packing buffer", bytes);
    return AlignedFloats(p);
}

// A's rows [i0, i0+mc) x columns [k0, k0+kc) into micro-panels of mr rows: panel p holds, for each k, the
// mr values of rows i0 + p·mr ... (rows past M are zero, so edge tiles need no special kernel)
void pack_a(const float* A, int64_t M, int64_t K, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int mr, float* Ap) {
    for (int64_t p = 0; p < mc; p += mr)
        for (int64_t k = 0; k < kc; k++)
            for (int i = 0; i < mr; i++) {
                const int64_t row = i0 + p + i;
                *Ap++ = row < M ? A[row * K + k0 + k] : 0.0f;
            }
}

// B's rows [k0, k0+kc) x columns [j0, j0+nc) into micro-panels of nr columns: panel q holds, for each k,
// the nr values of columns j0 + q·nr ... (columns past N are zero)
void pack_b(const float* B, int64_t N, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr, float* Bp) {
    for (int64_t q = 0; q < nc; q += nr)
        for (int64_t k = 0; k < kc; k++) {
            const float* b = B + (k0 + k) * N + j0 + q;
            const int64_t valid = std::min<int64_t>(nr, N - j0 - q);
            for (int j = 0; j < nr; j++) *Bp++ = j < valid ? b[j] : 0.0f;
        }
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// BLIS's five loops around the micro-kernel: jc over NC columns, pc over KC of K (pack B's panel), ic over
// MC rows (pack A's block), then jr and ir over the NR x MR micro-tiles.
void sgemm_packed(const Blocking& bl, MicroKernel kernel, int64_t M, int64_t N, int64_t K, const float* A,
                  const float* B, float* C) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        std::fill(C, C + M * N, 0.0f);
        return;
    }
    AlignedFloats Bp = aligned_floats((int64_t)bl.kc * round_up(std::min<int64_t>(N, bl.nc), bl.nr));
    AlignedFloats Ap = aligned_floats((int64_t)bl.kc * round_up(std::min<int64_t>(M, bl.mc), bl.mr));
    float edge[32 * 32];  // an edge tile is computed here, then its valid part copied to C
    for (int64_t jc = 0; jc < N; jc += bl.nc) {
        const int64_t nc = std::min<int64_t>(bl.nc, N - jc);
        for (int64_t pc = 0; pc < K; pc += bl.kc) {
            const int64_t kc = std::min<int64_t>(bl.kc, K - pc);
            const bool accumulate = pc > 0;  // the first KC slice overwrites C
            pack_b(B, N, pc, kc, jc, round_up(nc, bl.nr), bl.nr, Bp.get());
            for (int64_t ic = 0; ic < M; ic += bl.mc) {
                const int64_t mc = std::min<int64_t>(bl.mc, M - ic);
                pack_a(A, M, K, ic, round_up(mc, bl.mr), pc, kc, bl.mr, Ap.get());
                for (int64_t jr = 0; jr < nc; jr += bl.nr)
                    for (int64_t ir = 0; ir < mc; ir += bl.mr) {
                        const float* a = Ap.get() + ir * kc;
                        const float* b = Bp.get() + jr * kc;
                        float* c = C + (ic + ir) * N + jc + jr;
                        const int64_t mv = std::min<int64_t>(bl.mr, mc - ir), nv = std::min<int64_t>(bl.nr, nc - jr);
                        if (mv == bl.mr && nv == bl.nr) {
                            kernel(kc, a, b, c, N, accumulate);
                            continue;
                        }
                        for (int64_t i = 0; i < mv; i++)
                            for (int64_t j = 0; j < nv; j++) edge[i * bl.nr + j] = accumulate ? c[i * N + j] : 0.0f;
                        kernel(kc, a, b, edge, bl.nr, true);
                        for (int64_t i = 0; i < mv; i++)
                            for (int64_t j = 0; j < nv; j++) c[i * N + j] = edge[i * bl.nr + j];
                    }
            }
        }
    }
}

}  // namespace

void sgemm_cpu(CpuRung r, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
    CHECK(M >= 0 && N >= 0 && K >= 0, "sgemm_cpu: M %ld, N %ld, K %ld must be >= 0", (long)M, (long)N, (long)K);
    const std::string why = cpu_rung_unsupported(r);
    CHECK(why.empty(), "CPU rung %s cannot run here: %s", cpu_rung_info(r).name, why.c_str());
    switch (r) {
        case CpuRung::naive: return sgemm_naive(M, N, K, A, B, C);
        case CpuRung::blocked: return sgemm_blocked(M, N, K, A, B, C);
        case CpuRung::packed: return sgemm_packed(cpu_rung_blocking(r), microkernel_plain, M, N, K, A, B, C);
        case CpuRung::avx2: return sgemm_packed(cpu_rung_blocking(r), microkernel_avx2, M, N, K, A, B, C);
        case CpuRung::avx512: return sgemm_packed(cpu_rung_blocking(r), microkernel_avx512, M, N, K, A, B, C);
    }
}

}  // namespace penta::lab
