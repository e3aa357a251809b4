// test_gpu_fused.cpp — chapter 10, the fused kernels and their unfused sequences: RMSNorm forward and backward,
// RoPE forward and backward on q and k, SwiGLU forward and backward, softmax-cross-entropy (ignored rows
// included), multi-tensor AdamW (odd and tiny tensors included), each against the fp64 reference with its
// bf16/f32 bound, outputs poisoned first. Skipped, saying why, without CUDA or a GPU.
// Playbook: "Diving into the GPUs — fused kernels". Run: build/bin/tests_10 -ts='ch10 np1' -tc='*gpu fused*'
#include "../../10_kernels/gpu_checks.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::lab;
using namespace penta::testing;

TEST_SUITE("ch10 np1") {
    TEST_CASE("[gpu] gpu fused: every fused kernel and unfused sequence matches the fp64 reference") {
        SKIP_GPU_TEST("fused kernels", gpu_unavailable());
#if defined(PENTA_CUDA)
        // 70 tokens (not a multiple of the 16 rows of a backward block), hidden 200 (25 pieces of 8 on a
        // 32-thread block), RoPE at positions 1000.. (large angles), a vocabulary of 1000
        FusedShape s{70, 200, 704, 1000, 2, 4, 2, 64, {1, 5, 4096, 70001}, 1000};
        uint64_t seed = 60;
        for (FusedOp op : {FusedOp::rmsnorm_fwd, FusedOp::rmsnorm_bwd, FusedOp::rope, FusedOp::swiglu_fwd, FusedOp::swiglu_bwd,
                           FusedOp::cross_entropy, FusedOp::adamw})
            for (bool unfused : {false, true}) {
                const Reports r = check_fused(op, unfused, s, seed++);
                CHECK_MESSAGE(all_ok(r), summary(r));
            }
#endif
    }
}
