// test_gpu_gemm.cpp — chapter 10, the GPU GEMM ladder: every rung in every type it is built for against the
// fp64 reference, on shapes that leave partial tiles in M, N and K (and a 1-row product), every element
// written (outputs poisoned with NaN first); the shape rules refused by name. Skipped, saying why, without CUDA
// or without a GPU (the wgmma rung also on a GPU that is not sm_90).
// Playbook: "Diving into the GPUs". Run: build/bin/tests_10 -ts='ch10 np1' -tc='*gpu gemm*'
#include "../../10_kernels/gpu_checks.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::lab;
using namespace penta::testing;

TEST_SUITE("ch10 np1") {
    TEST_CASE("[gpu] gpu gemm: every rung matches the fp64 reference, partial tiles included") {
        SKIP_GPU_TEST("GPU GEMM ladder", gpu_unavailable());
#if defined(PENTA_CUDA)
        int ran = 0;
        for (const auto& info : gpu_rungs())
            for (GemmType t : {GemmType::f32, GemmType::bf16}) {
                const std::string no = gpu_rung_unsupported(info.rung, t);
                if (!no.empty()) {
                    MESSAGE("GPU rung " << info.name << " (" << (t == GemmType::f32 ? "f32" : "bf16") << ") not run: " << no);
                    continue;
                }
                // (M, N, K): whole tiles; partial tiles everywhere (K = 72 is 2.25 of the mma rung's K tiles);
                // one row; N below one wgmma tile
                const int64_t shapes[][3] = {{256, 256, 256}, {200, 136, 72}, {1, 8, 8}, {130, 264, 520}};
                for (const auto& s : shapes) {
                    const Reports r = check_gpu_gemm(info.rung, t, s[0], s[1], s[2], 31 + (uint64_t)ran++);
                    CHECK_MESSAGE(all_ok(r), summary(r));
                }
            }
        CHECK(ran >= 32);  // the SIMT rungs run on any GPU, in both types: 4 rungs x 2 types x 4 shapes
#endif
    }

    TEST_CASE("[gpu] gpu gemm: shapes the rungs cannot load are refused, naming the rule") {
#if !defined(PENTA_CUDA)
        SKIP_GPU_TEST("GPU GEMM ladder", gpu_unavailable());
#else
        // checked before the device is touched, so this runs in any CUDA build
        CHECK(contains(error_of([] { gpu_gemm(GpuRung::regtile, GemmType::f32, 16, 12, 16, nullptr, nullptr, nullptr, 0); }),
                       "N 12 and K 16 must be multiples of 8"));
        CHECK(contains(error_of([] { gpu_gemm(GpuRung::mma, GemmType::bf16, 0, 16, 16, nullptr, nullptr, nullptr, 0); }),
                       "M 0, N 16, K 16 must be >= 1"));
        CHECK(contains(error_of([] { parse_gpu_rung("tensorcore"); }),
                       "--rungs tensorcore: not a GPU rung (valid: naive,coalesced,smem,regtile,mma,wgmma)"));
        CHECK(contains(gpu_rung_unsupported(GpuRung::wgmma, GemmType::f32), "bf16 only"));
#endif
    }
}
