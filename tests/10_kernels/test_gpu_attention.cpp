// test_gpu_attention.cpp — chapter 10, flash attention forward and backward (causal, GQA, bf16, head dims 64
// and 128): out, lse, dq, dk, dv against the fp64 reference for the first and the last (batch, kv head)
// group, and out against the trainer's naive CUDA attention; GQA (4 and 2 query heads per kv head) and plain
// multi-head attention; shapes the kernels cannot tile refused by name. Skipped, saying why, without a GPU.
// Playbook: "Flash attention". Run: build/bin/tests_10 -ts='ch10 np1' -tc='*gpu flash*'
#include "../../10_kernels/gpu_checks.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::lab;
using namespace penta::testing;

TEST_SUITE("ch10 np1") {
    TEST_CASE("[gpu] gpu flash attention: forward and backward match the fp64 reference and the naive kernel") {
        SKIP_GPU_TEST("flash attention", gpu_unavailable());
#if defined(PENTA_CUDA)
        const FlashShape shapes[] = {{2, 256, 4, 1, 64}, {1, 384, 4, 2, 128}, {1, 128, 2, 2, 64}, {2, 128, 2, 1, 128}};
        uint64_t seed = 70;
        for (const FlashShape& s : shapes) {
            // head dim 128's backward needs 171 KB of shared memory: the H100 and H200 only; elsewhere refused by name
            const std::string no = flash_bwd_unsupported(s.D);
            if (!no.empty()) {
                MESSAGE("flash attention D " << s.D << " not run: " << no);
                CHECK(contains(error_of([&] { flash_bwd(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                        nullptr, nullptr, nullptr, s, 0); }),
                               "runs on the H100 and H200 (227 KB) only"));
                seed++;
                continue;
            }
            const Reports r = check_flash(s, seed++);
            CHECK_MESSAGE(all_ok(r), "B " << s.B << " T " << s.T << " H " << s.H << " Hkv " << s.Hkv << " D " << s.D << "\n"
                                          << summary(r));
        }
#endif
    }

    TEST_CASE("[gpu] gpu flash attention: shapes without a kernel are refused, naming the rule") {
#if !defined(PENTA_CUDA)
        SKIP_GPU_TEST("flash attention", gpu_unavailable());
#else
        CHECK(contains(error_of([] { flash_fwd(nullptr, nullptr, nullptr, nullptr, nullptr, {1, 128, 2, 1, 96}, 0); }),
                       "head dim 96: the kernels are built for 64 and 128"));
        CHECK(contains(error_of([] { flash_fwd(nullptr, nullptr, nullptr, nullptr, nullptr, {1, 100, 2, 1, 64}, 0); }),
                       "T 100 must be a multiple of 128"));
        CHECK(contains(error_of([] { flash_bwd(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                               nullptr, nullptr, {1, 128, 3, 2, 64}, 0); }),
                       "H must be a multiple of Hkv"));
#endif
    }
}
