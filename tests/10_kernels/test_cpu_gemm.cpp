// test_cpu_gemm.cpp — chapter 10, the CPU GEMM ladder: every rung this CPU runs against the fp64 reference
// on shapes that cut each blocking loop unevenly (edge tiles of MR and NR, a K longer than KC, an M longer than
// MC, an N longer than NC), every output element written (C is poisoned with NaN first); rung names parsed.
// Playbook: "Diving into the GPUs" (tiling on the CPU). Run: `make test CH=10`, or
//   build/bin/tests_10 -ts='ch10 np1' -tc='*cpu gemm*'
#include <cmath>

#include "../../10_kernels/cpu_gemm.hpp"
#include "../../10_kernels/reference.hpp"
#include "../../10_kernels/validate.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::lab;
using namespace penta::testing;

namespace {

// C from rung r on fresh random inputs (seed), against the fp64 reference over every row
ErrorReport run_rung(CpuRung r, int64_t M, int64_t N, int64_t K, uint64_t seed) {
    const std::vector<float> A = random_normal(M * K, seed), B = random_normal(K * N, seed + 1);
    std::vector<float> C((size_t)(M * N), NAN);
    sgemm_cpu(r, M, N, K, A.data(), B.data(), C.data());
    return compare(C, gemm_ref(A.data(), B.data(), M, N, K, false), Check::gemm_f32);
}

}  // namespace

TEST_SUITE("ch10 np1") {
    TEST_CASE("cpu gemm: every rung matches the fp64 reference on uneven shapes") {
        int ran = 0;
        for (const auto& info : cpu_rungs()) {
            const std::string why = cpu_rung_unsupported(info.rung);
            if (!why.empty()) {
                MESSAGE("rung " << info.name << " not run: " << why);
                continue;
            }
            ran++;
            // (M, N, K): a single element; tails of every tile; K over two KC slices; M over two MC blocks
            const int64_t shapes[][3] = {{1, 1, 1}, {37, 53, 29}, {42, 64, 2 * 384 + 5}, {2 * 336 + 7, 20, 50}, {3, 4096 + 40, 20}};
            for (const auto& s : shapes) {
                const ErrorReport e = run_rung(info.rung, s[0], s[1], s[2], 100 + (uint64_t)ran);
                // playbook: 000.12.2 — every CPU rung (blocked, packed: tiling) within f32's bound of the fp64 product
                CHECK_MESSAGE(e.ok, info.name << " at " << s[0] << "x" << s[1] << "x" << s[2] << ": " << e.str());
            }
        }
        CHECK(ran >= 3);  // naive, blocked and packed run anywhere
    }

    TEST_CASE("cpu gemm: K = 0 gives zeros and M = 0 or N = 0 writes nothing") {
        for (const auto& info : cpu_rungs()) {
            if (!cpu_rung_unsupported(info.rung).empty()) continue;
            std::vector<float> C(12, NAN);
            sgemm_cpu(info.rung, 3, 4, 0, nullptr, nullptr, C.data());
            for (float c : C) CHECK_MESSAGE(c == 0.0f, info.name);
            sgemm_cpu(info.rung, 0, 4, 5, nullptr, nullptr, nullptr);
            sgemm_cpu(info.rung, 3, 0, 5, nullptr, nullptr, nullptr);
        }
    }

    TEST_CASE("cpu gemm: blockings are multiples of the register tile and rung names parse") {
        for (CpuRung r : {CpuRung::packed, CpuRung::avx2, CpuRung::avx512}) {
            const Blocking b = cpu_rung_blocking(r);
            CHECK(b.mc % b.mr == 0);  // pack_a relies on it: a full MC block holds whole micro-panels
            CHECK(b.nc % b.nr == 0);
            CHECK(b.mr * b.nr <= 32 * 32);  // the edge tile buffer
        }
        CHECK(parse_cpu_rung("avx512") == CpuRung::avx512);
        CHECK(contains(error_of([] { parse_cpu_rung("avx1024"); }), "unknown CPU rung 'avx1024' (valid: naive|blocked|packed|avx2|avx512)"));
    }
}
