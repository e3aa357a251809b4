// test_ep.cpp — chapter 08, expert parallelism: every layout trains like one rank (ARCHITECTURE.md §6) — ep 2
// and 4, ep 2 × dp 2, ep 2 × tp 2 (+sp), ZeRO-1/2/3 with the experts sharded over edp, the capacity dropping
// the same copies as on one rank, the bias balancing — and the all-to-all bytes equal the formula for the
// routing measured.
// Playbook: "Expert parallelism". Run: `make test CH=08`, or by hand
//   mpirun -np 4 build/bin/tests_08 -ts='ch08 np4'
#include "../../04_tensor_parallel/tp_optimizer.hpp"
#include "../../common/formulas.hpp"
#include "../04_tensor_parallel/tp_testing.hpp"
#include "ep_testing.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::ep_testing;

namespace {

constexpr int kSteps = 3;
constexpr double kRtol = 2e-5;

// One micro-batch forward + backward on a dp × ep grid (the whole world): the bytes each rank's ep group
// counted against ep_layer_all_to_all_bytes for the routing the MoE layers recorded (every rank's copies
// per destination, gathered over the ep group), and the experts' units each rank holds.
void check_all_to_all_bytes(int dp, int ep, double capacity) {
    const LlamaConfig cfg = moe_config();
    tp_testing::RandomTokens data((int32_t)cfg.vocab);
    ParallelGrid grid(make_world_comm(CommBackend::mpi), GridShape{dp, 1, 1, 1, ep}, &cfg);
    MoeOptions o;
    o.capacity_factor = capacity;
    auto moe = std::make_shared<MoeLayer>(cfg, o, Device::cpu, &grid.ep());
    ModelOptions mo;
    mo.mlp_core = moe;
    Model m(cfg, Device::cpu, 5, mo);
    // this rank holds E/ep experts: 3 h f_e each, in one unit per layer
    const int El = moe->experts_per_rank();
    CHECK(El == cfg.moe.experts / ep);
    const ParamUnit& experts = m.layout().units[m.layout().layer_units[0][1]];
    CHECK(experts.numel == El * 3 * cfg.hidden * cfg.moe.expert_ffn);
    CHECK(m.layout().find(strfmt("model.layers.0.block_sparse_moe.experts.%d.w1.weight", moe->first_expert())).unit ==
          m.layout().layer_units[0][1]);
    TrainConfig tc;
    tc.seq = 16, tc.micro_batch = 3;
    const BatchPlan plan = data_parallel_plan(tc, grid.dp());
    std::vector<MicroBatch> mbs = make_micro_batches(data, 0, plan, Device::cpu);
    const CommCounters before = grid.ep().counters();
    MicroBatchActs acts = m.forward(mbs[0], 100.0);
    m.backward(acts);
    const CommCounters sent = grid.ep().counters() - before;
    double formula = 0, copies_away = 0;
    for (int64_t i = 0; i < cfg.n_layers; i++) {
        std::vector<std::vector<int64_t>> S(ep, std::vector<int64_t>(ep));
        for (int q = 0; q < ep; q++) {
            const std::vector<double> col = grid.ep().all_gather_scalar(moe->stats()[i].sent[q]);
            for (int p = 0; p < ep; p++) S[p][q] = (int64_t)col[p];
        }
        formula += ep_layer_all_to_all_bytes(S, grid.ep().rank(), cfg.hidden, El, true);
        for (int q = 0; q < ep; q++) copies_away += q != grid.ep().rank() ? S[grid.ep().rank()][q] : 0;
    }
    INFO("dp " << dp << " ep " << ep << " capacity " << capacity << ": measured " << sent.total_bytes() << ", formula "
               << formula);
    CHECK(copies_away > 0);  // tokens did travel: the formula is not only the counts
    CHECK(sent.bytes[(int)CommOp::all_to_all] == doctest::Approx(formula).epsilon(1e-12));
    CHECK(sent.total_bytes() == sent.bytes[(int)CommOp::all_to_all]);  // nothing but all-to-alls on ep
    // per MoE layer: 1 counts + 2 forward + 2 backward all-to-alls
    CHECK(sent.calls[(int)CommOp::all_to_all] == 5 * cfg.n_layers);
    if (capacity > 0) {
        double dropped = 0;
        for (int64_t i = 0; i < cfg.n_layers; i++)
            for (int64_t e = 0; e < cfg.moe.experts; e++) dropped += moe->stats()[i].routed[e] - moe->stats()[i].kept[e];
        CHECK(grid.world().all_reduce_scalar(dropped) > 0);
    }
}

}  // namespace

TEST_SUITE("ch08 np2") {

TEST_CASE("ep 2 trains like one rank: no dropping, dropping with the same per-sequence capacity, bias balancing") {
    const LlamaConfig cfg = moe_config();
    EpLayout L;  // dp 2, ep 2
    // playbook: 000.09.1 — ep 2 trains like one rank, tokens routed to the experts' ranks
    check_ep_trains_like_one_rank(cfg, L, kSteps, kRtol);
    L.moe.capacity_factor = 0.75;  // copies dropped: the same ones as on one rank
    L.grad_accum = 2;
    const EpRun dropping = run_ep_layout(cfg, L, 1);
    CHECK(dropping.dropped[0] > 0);
    check_ep_trains_like_one_rank(cfg, L, kSteps, kRtol);
    L = EpLayout{};
    L.moe.balance = MoeBalance::bias;
    L.moe.bias_rate = 0.05;  // large enough to change choices within the steps
    check_ep_trains_like_one_rank(cfg, L, kSteps, kRtol);
}

TEST_CASE("ep 2: all-to-all bytes equal the formula for the measured routing, with and without dropping") {
    // playbook: 000.09.1 000.09.5 — all-to-all bytes = ep_layer_all_to_all_bytes of the measured routing
    check_all_to_all_bytes(2, 2, 0);
    check_all_to_all_bytes(2, 2, 0.5);
}

}  // TEST_SUITE

TEST_SUITE("ch08 np4") {

TEST_CASE("ep 4, ep 2 x dp 2 train like one rank; the experts' gradients summed over edp") {
    const LlamaConfig cfg = moe_config();
    EpLayout L;
    L.dp = 4, L.ep = 4;
    // playbook: 000.09.3 — ep 4, ep 2 × dp 2 train like one rank
    check_ep_trains_like_one_rank(cfg, L, kSteps, kRtol);
    L.ep = 2;  // dp 4: two ep groups of 2, experts replicated over edp groups of 2
    L.micro_batch = 1, L.grad_accum = 2, L.recompute = Recompute::full;
    check_ep_trains_like_one_rank(cfg, L, kSteps, kRtol);
}

TEST_CASE("ep 2 x tp 2 (and +sp) trains like one rank: experts cut over tp, tokens over ep") {
    const LlamaConfig cfg = moe_config();
    EpLayout L;
    L.dp = 2, L.tp = 2, L.ep = 2;
    check_ep_trains_like_one_rank(cfg, L, kSteps, kRtol);
    L.sp = true;
    L.moe.capacity_factor = 1.0;
    check_ep_trains_like_one_rank(cfg, L, kSteps, kRtol);
}

TEST_CASE("ep 2 x dp 2 with ZeRO-1/2/3 trains like one rank: the experts' unit sharded over edp") {
    const LlamaConfig cfg = moe_config();
    for (int zero : {1, 2, 3}) {
        EpLayout L;
        L.dp = 4, L.ep = 2, L.zero = zero;
        L.micro_batch = 1;
        // playbook: 000.10.4 — ep 2 × dp 2 with ZeRO-1/2/3 trains like one rank
        check_ep_trains_like_one_rank(cfg, L, kSteps, kRtol);
    }
}

TEST_CASE("ep 4 and ep 2 x dp 2: all-to-all bytes equal the formula for the measured routing") {
    check_all_to_all_bytes(4, 4, 0);
    check_all_to_all_bytes(4, 2, 0.5);
}

}  // TEST_SUITE
