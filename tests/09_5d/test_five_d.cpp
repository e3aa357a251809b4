// test_five_d.cpp — chapter 09, training: N steps of the 5D trainer's parts equal one rank training the same global
// batch (losses, grad norms, final weights per tensor) for dp2·tp2·pp2, cp2·tp2·pp2, ep2·pp2 (MoE), dp2·pp2 with
// ZeRO-1, dp2·cp2·tp2 with SP, and dp2·pp2·cp2·tp2 with ep2 (all five axes, 16 ranks).
// Playbook: "5D parallelism". Run: `make test CH=09`, or
//   mpirun --allow-run-as-root --oversubscribe -np 8 build/bin/tests_09 -ts='ch09 np8'
#include "five_d_testing.hpp"

using namespace penta;
using namespace penta::five_d_testing;

namespace {
constexpr int kSteps = 2;
constexpr double kRtol = 2e-4;  // as chapter 07's: the pipeline's stages sum the loss in another order
}  // namespace

TEST_SUITE("ch09 np4") {
    TEST_CASE("ep 2 × pp 2 (MoE, the balance loss through the pipeline link) trains like one rank") {
        FiveDLayout L;
        L.dp = 2, L.ep = 2, L.pp = 2, L.moe = true;
        check_5d_trains_like_one_rank(L, kSteps, kRtol);
    }
    TEST_CASE("dp 2 × pp 2 with ZeRO-1 trains like one rank") {
        FiveDLayout L;
        L.dp = 2, L.pp = 2, L.zero = 1;
        check_5d_trains_like_one_rank(L, kSteps, kRtol);
    }
}

TEST_SUITE("ch09 np8") {
    TEST_CASE("dp 2 × tp 2 × pp 2 (1F1B) trains like one rank") {
        FiveDLayout L;
        L.dp = 2, L.tp = 2, L.pp = 2;
        check_5d_trains_like_one_rank(L, kSteps, kRtol);
    }
    TEST_CASE("cp 2 × tp 2 × pp 2 trains like one rank") {
        FiveDLayout L;
        L.cp = 2, L.tp = 2, L.pp = 2;
        check_5d_trains_like_one_rank(L, kSteps, kRtol);
    }
    TEST_CASE("dp 2 × cp 2 × tp 2 with sequence parallelism trains like one rank") {
        FiveDLayout L;
        L.dp = 2, L.cp = 2, L.tp = 2, L.sp = true;
        // playbook: 000.10.5 — dp × cp × tp + sp together train like one rank
        check_5d_trains_like_one_rank(L, kSteps, kRtol);
    }
}

TEST_SUITE("ch09 np16") {
    TEST_CASE("all five axes: dp 2 × pp 2 × cp 2 × tp 2, ep 2 (MoE, bias balancing) trains like one rank") {
        FiveDLayout L;
        L.dp = 2, L.pp = 2, L.cp = 2, L.tp = 2, L.ep = 2, L.moe = true, L.balance = "bias";
        L.micro_batch = 1;
        // playbook: 000.10.5 — all five axes at once (cp 2 and ep 2 in one run) train like one rank
        check_5d_trains_like_one_rank(L, kSteps, kRtol);
    }
}
