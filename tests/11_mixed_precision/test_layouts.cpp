// test_layouts.cpp — the low-precision policies through chapter 09's layouts on two ranks, each training like
// one rank under the same policy (ARCHITECTURE.md §6, chapter 09's runner: five_d_testing.hpp): fp16 through a
// 1F1B pipeline (the loss scale's backward crossing the stage link, the skip decided alike on both stages),
// bf16 through context parallelism's ring attention and through ZeRO-3 (bf16 weights gathered, f32 master
// shards), fp8 through tensor + sequence parallelism (the GEMMs' tiles cut by tp) and through expert
// parallelism with bias balancing (routing counts from bf16-weight routers).
// Each policy has its tolerance: its one-rank reference trains a second time with the sums in another order
// (micro-batches of one sequence), and check_same_training holds the layout to that spread — in fp8 the
// weight-gradient GEMM's tiles run along the tokens, so another order also rounds other tiles.
// Playbook: "Mixed precision training", "5D parallelism". Run: `make test CH=11`, or
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/bin/tests_11 -ts='ch11 np2'
#include "../09_5d/five_d_testing.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::five_d_testing;

namespace {

constexpr int kSteps = 3;

// losses and grad norms within rtol per step (the references' reordered runs within rtol / 10)
double rtol_of(const std::string& precision) { return precision == "fp8" ? 4e-2 : 2e-3; }

void check(FiveDLayout L, const std::string& precision) {
    L.precision = precision;
    check_5d_trains_like_one_rank(L, kSteps, rtol_of(precision));
}

}  // namespace

TEST_SUITE("ch11 np2") {

TEST_CASE("precision: fp16 under pp 2 (1F1B) trains like one fp16 rank, the loss scale through the stage link") {
    FiveDLayout L;
    L.pp = 2, L.schedule = "1f1b";
    check(L, "fp16");
}

TEST_CASE("precision: bf16 under cp 2 (ring attention) trains like one bf16 rank") {
    FiveDLayout L;
    L.cp = 2;
    check(L, "bf16");
}

TEST_CASE("precision: bf16 under dp 2 with ZeRO-3 (bf16 gathers, f32 master shards) trains like one bf16 rank") {
    FiveDLayout L;
    L.dp = 2, L.zero = 3;
    check(L, "bf16");
}

TEST_CASE("precision: fp8 under tp 2 with sequence parallelism trains like one fp8 rank") {
    FiveDLayout L;
    L.tp = 2, L.sp = true;
    check(L, "fp8");
}

TEST_CASE("precision: fp8 under ep 2 (MoE, bias balancing) trains like one fp8 rank") {
    FiveDLayout L;
    L.dp = 2, L.ep = 2, L.moe = true, L.balance = "bias";
    check(L, "fp8");
}

}  // TEST_SUITE
