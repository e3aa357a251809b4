// test_pp.cpp — chapter 07, training: N steps of pipeline-parallel training equal one rank training the same
// global batch (losses, grad norms, final weights) for pp 2 and pp 4 under every schedule with m = p, 2p and an odd
// m (interleaved v = 2 with a short last round, DualPipe played for odd or few micro-batches), uneven layer splits
// (pp 2 and pp 4), a tied model (`small` at pp 2 and 4: the last stage's replica of the table stays equal to the
// first stage's), interleaved with v = 2, pp 2 × dp 2 (all-reduce, ZeRO-1, ZeRO-2) and pp 2 × tp 2 (with and
// without SP); in each the bytes every stage sends per step equal their closed form (m messages at the ends, 2m in
// the middle, ×v interleaved; the tied table's pair sum); ZB-H1's B-then-W-later gives bitwise 1F1B's fused
// gradients; the Chrome trace is valid JSON in the trace event format.
// Playbook: "Pipeline parallelism". Run: `make test CH=07`, or
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bin/tests_07 -ts='ch07 np4'
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "../../07_pipeline_parallel/tools/chrome_trace.hpp"
#include "pp_testing.hpp"

using namespace penta;
using namespace penta::testing;
using namespace penta::pp_testing;

namespace {
constexpr int kSteps = 2;
constexpr double kRtol = 2e-4;

// every schedule on p stages with m micro-batches (interleaved with v = 2; DualPipe played where m is odd or below
// 2p - 2), with the layers the schedule needs
void check_every_schedule(int p, int m) {
    for (const char* s : {"afab", "1f1b", "zb1", "interleaved", "dualpipe"}) {
        PpLayout L;
        L.pp = p, L.grad_accum = m, L.schedule = s, L.micro_batch = 1;
        if (L.schedule == "interleaved") {
            L.chunks = 2, L.n_layers = 2 * p;
        }
        check_pp_trains_like_one_rank(L, kSteps, kRtol);
    }
}
}  // namespace

TEST_SUITE("ch07 np2") {
    TEST_CASE("pp 2 trains like one rank under every schedule, m = p, 2p and odd") {
        // playbook: 000.08.1 000.C.4 — every schedule trains like one rank; each stage's bytes a step = the
        //   activations' closed form
        for (int m : {2, 4, 3}) check_every_schedule(2, m);
    }
    TEST_CASE("pp 2 with an uneven split (3 + 1 layers), with full recomputation and with offload trains like one rank") {
        PpLayout L;
        L.layers = "3,1";
        check_pp_trains_like_one_rank(L, kSteps, kRtol);
        L.layers = "", L.schedule = "zb1", L.recompute = Recompute::full;
        check_pp_trains_like_one_rank(L, kSteps, kRtol);
        // offload under 1F1B and ZB-H1: several micro-batches' layers parked on the host at once, W after B
        for (const char* s : {"1f1b", "zb1"}) {
            L.schedule = s, L.recompute = Recompute::offload;
            check_pp_trains_like_one_rank(L, kSteps, kRtol);
        }
    }
    TEST_CASE("pp 2 on the tied `small` model: the last stage's replica of the table stays the first stage's") {
        for (const char* s : {"1f1b", "dualpipe"}) {
            PpLayout L;
            L.small = true, L.schedule = s, L.seq = 8, L.micro_batch = 1;
            INFO(L.str());
            const PpRun run = check_pp_trains_like_one_rank(L, kSteps, kRtol);
            // 1F1B: the last stage's table; DualPipe on 2 stages: stage 1 is a copy of stage 0, every tensor of it
            const int all = (int)ParamLayout::build(preset("small")).tensors.size();
            CHECK(run.replicas_checked == (world_rank() == 1 ? (L.schedule == "1f1b" ? 1 : all) : 0));
        }
    }
    TEST_CASE("ZB-H1's B now and W later gives bitwise the gradients of 1F1B's fused backward") {
        PpLayout L;
        L.grad_accum = 4;
        const PpRun fused = run_pp_layout(L, kSteps, true);
        L.schedule = "zb1";
        const PpRun split = run_pp_layout(L, kSteps, true);
        REQUIRE(fused.grads.size() == (size_t)kSteps);
        REQUIRE(split.grads.size() == (size_t)kSteps);
        for (int s = 0; s < kSteps; s++) {
            CHECK(split.grads[s].size() == fused.grads[s].size());
            // playbook: 000.08.7 — ZB-H1's B then W = 1F1B's fused backward, bitwise
            CHECK(std::memcmp(split.grads[s].data(), fused.grads[s].data(), fused.grads[s].size() * sizeof(float)) == 0);
            CHECK(split.losses[s] == fused.losses[s]);
            CHECK(split.norms[s] == fused.norms[s]);
        }
        double sq = 0;
        for (float g : fused.grads[0]) sq += (double)g * g;
        CHECK(sq > 0);  // gradients that are all zero would prove nothing
        CHECK(std::memcmp(split.params.data(), fused.params.data(), fused.params.size() * sizeof(float)) == 0);
    }
    TEST_CASE("the Chrome trace of a pipeline step is trace-event JSON: a process per rank, compute and comm tracks") {
        PpLayout L;
        const LlamaConfig cfg = L.config();
        tp_testing::RandomTokens data((int32_t)cfg.vocab);
        ParallelGrid grid(make_world_comm(CommBackend::mpi), GridShape{1, 2, 1, 1}, &cfg);
        TrainConfig tc;
        tc.seq = L.seq, tc.micro_batch = L.micro_batch, tc.grad_accum = L.grad_accum, tc.pp = 2;
        PipelineParts parts(tc, PipelineFlags{}, cfg, grid, Device::cpu, tp_testing::kAdamW);
        parts.executor->record_trace(true);
        Trainer trainer = parts.trainer();
        training_step(trainer, data, 0, data_parallel_plan(tc, grid.dp()), 1e-3f, 1.0f);
        const std::string path = "/tmp/penta_test_trace_" + std::to_string(getppid()) + ".json";
        write_chrome_trace(path, grid.world(), parts.executor->trace(), strfmt("rank %d", grid.world().rank()));
        grid.world().barrier();
        std::ifstream f(path);
        const nlohmann::json j = nlohmann::json::parse(f);  // throws (fails the test) if it is not JSON
        int compute = 0, comm = 0, names = 0;
        std::set<int> pids;
        for (const auto& e : j.at("traceEvents")) {
            const std::string ph = e.at("ph");
            CHECK((ph == "X" || ph == "M"));
            pids.insert(e.at("pid").get<int>());
            if (ph == "M") {
                names += e.at("name") == "process_name";
                continue;
            }
            CHECK(e.at("dur").get<double>() >= 0);
            CHECK(e.at("ts").get<double>() >= 0);
            (e.at("tid").get<int>() == 0 ? compute : comm)++;
        }
        CHECK(pids == std::set<int>{0, 1});
        CHECK(names == 2);
        CHECK(compute == 2 * 2 * L.grad_accum);  // F and BW of every micro-batch on both stages
        CHECK(comm >= 2 * L.grad_accum);         // at least every send
        grid.world().barrier();
        if (grid.world().rank() == 0) std::remove(path.c_str());
    }
}

TEST_SUITE("ch07 np4") {
    TEST_CASE("pp 4 trains like one rank under every schedule, m = p, 2p and odd") {
        for (int m : {4, 8, 5}) check_every_schedule(4, m);
    }
    TEST_CASE("pp 4 with an uneven split (2, 1, 2, 1 of 6 layers) and on the tied `small` model trains like one rank") {
        PpLayout U;
        U.pp = 4, U.n_layers = 6, U.layers = "2,1,2,1";
        check_pp_trains_like_one_rank(U, kSteps, kRtol);
        PpLayout T;  // the table on stage 0, its replica (lm_head) on stage 3, two stages between them
        T.pp = 4, T.small = true, T.micro_batch = 1;
        const PpRun run = check_pp_trains_like_one_rank(T, kSteps, kRtol);
        CHECK(run.replicas_checked == (world_rank() == 3 ? 1 : 0));
    }
    TEST_CASE("pp 2 × dp 2 trains like one rank: all-reduce once per step, ZeRO-1, ZeRO-2") {
        for (int z : {0, 1, 2})
            for (const char* s : {"1f1b", "interleaved"}) {
                PpLayout L;
                L.dp = 2, L.zero = z, L.schedule = s;
                if (L.schedule == "interleaved") L.chunks = 2;
                // playbook: 000.10.2 000.10.3 — pp × dp with ZeRO-1/2 trains like one rank; a stage sends activations
                //   (bytes = closed form), dp the gradients
                check_pp_trains_like_one_rank(L, kSteps, kRtol);
            }
        PpLayout T;  // a tied model: the replica's sum over the pair after ZeRO's shards
        T.dp = 2, T.zero = 1, T.tied = true, T.schedule = "zb1";
        check_pp_trains_like_one_rank(T, kSteps, kRtol);
    }
    TEST_CASE("pp 2 × tp 2 trains like one rank, with and without sequence parallelism") {
        for (bool sp : {false, true}) {
            PpLayout L;
            L.tp = 2, L.sp = sp, L.schedule = sp ? "dualpipe" : "1f1b";
            // playbook: 000.10.4 — pp 2 × tp 2 (± sp) trains like one rank
            check_pp_trains_like_one_rank(L, kSteps, kRtol);
        }
    }
}
