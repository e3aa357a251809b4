// test_cp.cpp — chapter 06, training: N steps of context-parallel training equal one rank training the same
// global batch (losses, grad norms, final weights) for cp 2 and cp 4 (ring and all-gather, zig-zag and
// contiguous, with gradient accumulation and recomputation), cp 2 × dp 2, cp 2 × tp 2 with and without SP,
// cp 2 with ZeRO-1 and ZeRO-3 (ZeRO over dp × cp); and the activations one micro-batch keeps fall to 1/cp of
// the decoder layers' (the formula at s/cp tokens, byte for byte).
// Playbook: "Context parallelism". Run: `make test CH=06`, or
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bin/tests_06 -ts='ch06 np4'
#include "../../common/formulas.hpp"
#include "cp_testing.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::cp_testing;

namespace {
constexpr int kSteps = 3;
constexpr double kRtol = 2e-4;
}  // namespace

TEST_SUITE("ch06 np2") {
    TEST_CASE("cp 2 trains like one rank: ring and all-gather, zig-zag and contiguous") {
        for (CpAttn a : {CpAttn::ring, CpAttn::allgather})
            for (CpShard s : {CpShard::zigzag, CpShard::contiguous}) {
                CpLayout L;
                L.attn = a, L.shard = s;
                // playbook: 000.07.2 — ring and all-gather CP train like one rank: only attention exchanges K/V
                check_cp_trains_like_one_rank(L, kSteps, kRtol);
            }
    }
    TEST_CASE("cp 2 trains like one rank with gradient accumulation and full recomputation") {
        CpLayout L;
        L.grad_accum = 2, L.recompute = Recompute::full;
        check_cp_trains_like_one_rank(L, kSteps, kRtol);
    }
    TEST_CASE("cp 2 with ZeRO-1 and ZeRO-3 over dp × cp trains like one rank") {
        for (int z : {1, 3}) {
            CpLayout L;
            L.zero = z;
            check_cp_trains_like_one_rank(L, kSteps, kRtol);
        }
    }
    TEST_CASE("cp 2 keeps exactly the formula's activations at s/cp tokens: half of cp 1's decoder layers") {
        CpLayout L;
        L.seq = 32, L.micro_batch = 2;
        const CpRun run = run_cp_layout(L, 1);
        const LlamaConfig c = tp_testing::tp_config(64);
        const int64_t half = llama_activation_bytes(c, Recompute::none, AttentionKernel::flash, L.micro_batch, L.seq / 2);
        const int64_t whole = llama_activation_bytes(c, Recompute::none, AttentionKernel::flash, L.micro_batch, L.seq);
        INFO("measured " << run.saved_activation_bytes << ", formula at s/cp " << half << ", at s " << whole);
        // playbook: 000.07.1 — a rank keeps exactly the formula's activations at s/cp tokens
        CHECK(run.saved_activation_bytes == half);
        CHECK(2 * half == whole);  // every saved tensor is per token here (flash attention keeps no T x T)
    }
}

TEST_SUITE("ch06 np4") {
    TEST_CASE("cp 4 trains like one rank: ring zig-zag, all-gather contiguous") {
        CpLayout L;
        L.cp = 4, L.seq = 32;
        check_cp_trains_like_one_rank(L, kSteps, kRtol);
        L.attn = CpAttn::allgather, L.shard = CpShard::contiguous;
        check_cp_trains_like_one_rank(L, kSteps, kRtol);
    }
    TEST_CASE("cp 2 × dp 2 trains like one rank, plain all-reduce and ZeRO-2 over dp × cp") {
        for (int z : {0, 2}) {
            CpLayout L;
            L.dp = 2, L.zero = z;
            check_cp_trains_like_one_rank(L, kSteps, kRtol);
        }
    }
    TEST_CASE("cp 2 × tp 2 trains like one rank, with and without sequence parallelism") {
        for (bool sp : {false, true}) {
            CpLayout L;
            L.tp = 2, L.sp = sp;
            check_cp_trains_like_one_rank(L, kSteps, kRtol);
        }
    }
}
