// test_planner.cpp — the layout planner (09_5d/planner.hpp) on its own, one rank, no training: the playbook's
// model-state figures (16 bytes per parameter in bf16 mixed precision: 128.5 GB for Llama 3 8B), ZeRO's shards
// adding up to the model, the refusals (each naming its flags and rule), the ranking obeying the three steps
// in order, the bubble and the links, and the playbook's published choices: an 8B model on 64 H100s needs
// neither tp nor pp, a 70B model on 512 H100s takes tp = 8 inside the node.
// Playbook: "Finding the best training configuration". Run: `make test CH=09`, or by hand
//   build/bin/tests_09 -ts='ch09 np1'
#include "../../09_5d/planner.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::plan;

namespace {

Job job_of(const std::string& model, int64_t seq, int64_t gbs, plan::Precision p = plan::Precision::bf16) {
    Job j;
    j.model = preset(model);
    j.seq = seq, j.global_batch = gbs, j.precision = p;
    return j;
}

Layout grid(int dp, int tp, int pp, int cp, int zero = 0) {
    Layout L;
    L.grid = GridShape{dp, pp, cp, tp, 1};
    L.zero = zero, L.sp = tp > 1;
    return L;
}

// the error check_layout throws, "" when it passes
std::string refusal(const Job& j, const Machine& m, const Layout& L, int world, bool cross = false) {
    try {
        check_layout(j, m, L, world, cross);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_SUITE("ch09 np1") {
    TEST_CASE("model state: 16 bytes per parameter in bf16 mixed precision (Llama 3 8B: 128.5 GB), 16 in fp32") {
        const Machine m = machine_preset("h100");
        Job j = job_of("llama3-8b", 4096, 1);
        const int64_t N = j.model.n_params();
        const RankPrediction r = predict_rank(j, m, grid(1, 1, 1, 1), 0);
        CHECK(r.numel == N);
        CHECK(r.state.params == 2 * N);
        CHECK(r.state.grads == 2 * N);
        CHECK(r.state.master == 4 * N);
        CHECK(r.state.optim == 8 * N);
        CHECK(r.state.total() / 1e9 == doctest::Approx(128.5).epsilon(0.001));  // seed 003's figure
        j.precision = plan::Precision::fp32;
        const RankPrediction f = predict_rank(j, m, grid(1, 1, 1, 1), 0);
        CHECK(f.state.total() == 16 * N);
        CHECK(f.state.master == 0);
    }

    TEST_CASE("ZeRO shards add up to the model; ZeRO-3 on 64 ranks is the playbook's 16Ψ/64 within the rounding") {
        const Machine m = machine_preset("h100");
        const Job j = job_of("llama3-8b", 4096, 64);
        const int64_t N = j.model.n_params();
        int64_t sum = 0;
        for (int d = 0; d < 64; d++) sum += predict_rank(j, m, grid(64, 1, 1, 1, 3), d).shard;
        CHECK(sum == N);
        const RankPrediction r = predict_rank(j, m, grid(64, 1, 1, 1, 3), 0);
        const ModelStateBytes book = zero_model_state_bytes_bf16_mixed(3, N, 64);
        // our units are cut one by one, the first n % 64 ranks one element longer each: at most one per unit
        const int64_t units = j.model.n_layers + 2;
        CHECK(r.state.total() >= book.total());
        CHECK(r.state.total() - book.total() <= 16 * units);
        // ZeRO-1 and -2 keep the bf16 weights (and ZeRO-1 the grads) whole
        CHECK(predict_rank(j, m, grid(64, 1, 1, 1, 1), 0).state.params == 2 * N);
        CHECK(predict_rank(j, m, grid(64, 1, 1, 1, 1), 0).state.grads == 2 * N);
        CHECK(predict_rank(j, m, grid(64, 1, 1, 1, 2), 0).state.grads < 2 * N / 63);
    }

    TEST_CASE("tp and pp divide the weights: tp 8 × pp 4 holds about 1/32 of Llama 3 70B per rank") {
        const Machine m = machine_preset("h100");
        const Job j = job_of("llama3-70b", 4096, 64);
        const RankPrediction w = predict_worst_rank(j, m, grid(2, 8, 4, 1, 1));
        const double share = (double)w.numel / (double)j.model.n_params();
        CHECK(share > 1.0 / 32);        // the stages with the embedding or the head hold a little more
        CHECK(share < 1.15 / 32);
    }

    TEST_CASE("refusals name the flags and the rule") {
        const Machine m = machine_preset("h100");
        const Job j = job_of("llama3-70b", 4096, 256);
        CHECK(refusal(j, m, grid(4, 8, 2, 1), 64) == "");
        Job mha = j;
        mha.model.n_kv_heads = mha.model.n_heads;  // 64 kv heads: tp 16 divides them, so only the node rule is left
        const std::string cross = refusal(mha, m, grid(4, 16, 1, 1), 64);
        CHECK(cross.find("--tp 16") != std::string::npos);
        CHECK(cross.find("--gpus-per-node 8") != std::string::npos);
        CHECK(cross.find("--allow-cross-node-tp") != std::string::npos);
        CHECK(refusal(mha, m, grid(4, 16, 1, 1), 64, true) == "");  // forced: considered
        CHECK(refusal(j, m, grid(4, 16, 1, 1), 64, true).find("--tp 16 must divide") != std::string::npos);
        CHECK(refusal(j, m, grid(8, 8, 2, 1, 3), 128).find("--zero 3 with --pp 2") != std::string::npos);
        Layout nosp = grid(64, 1, 1, 1);
        nosp.sp = true;
        CHECK(refusal(j, m, nosp, 64).find("--sp needs --tp > 1") != std::string::npos);
        CHECK(refusal(j, m, grid(4, 8, 1, 1), 64).find("--dp") != std::string::npos);  // 32 ranks, not 64
        CHECK(refusal(j, m, grid(4, 3, 1, 1), 12).find("--tp") != std::string::npos);  // 3 does not divide the heads
        Job odd = j;
        odd.seq = 4100;
        CHECK(refusal(odd, m, grid(8, 1, 1, 8), 64).find("--cp 8") != std::string::npos);
        Layout inter = grid(8, 8, 4, 1);
        inter.schedule = PipeScheduleKind::interleaved, inter.chunks = 2, inter.grad_accum = 6;  // m not a multiple of p: legal,
        CHECK(refusal(j, m, inter, 256) == "");  // chapter 07 plays the last round short (any m)
        Layout ep = grid(64, 1, 1, 1);
        ep.grid.ep = 2;
        CHECK(refusal(j, m, ep, 64).find("--ep 2") != std::string::npos);  // a dense model
        CHECK_THROWS_WITH_AS(machine_preset("a100"), doctest::Contains("--machine a100"), Error);
    }

    TEST_CASE("the bubble is (p-1)/m of the compute (1F1B), 1/v of it interleaved; a cross-node tp pays InfiniBand") {
        const Machine m = machine_preset("h100");
        Job j = job_of("llama3-70b", 4096, 64);
        j.model.n_kv_heads = j.model.n_heads;  // so that tp 16 divides the kv heads
        Layout L = grid(2, 8, 4, 1, 1);
        L.grad_accum = 32;
        const StepTime t = predict_time(j, m, L, predict_worst_rank(j, m, L));
        CHECK(t.bubble == doctest::Approx(t.compute * 3.0 / 32));
        L.schedule = PipeScheduleKind::interleaved, L.chunks = 2;
        const StepTime ti = predict_time(j, m, L, predict_worst_rank(j, m, L));
        CHECK(ti.bubble == doctest::Approx(ti.compute * 3.0 / 64));
        Layout wide = grid(4, 16, 1, 1, 1);
        const RankPrediction w = predict_worst_rank(j, m, wide);
        const StepTime tw = predict_time(j, m, wide, w);
        CHECK(tw.comm.tp == doctest::Approx(w.bytes.tp / m.inter_bw));
        const Layout in_node = grid(8, 8, 1, 1, 1);
        const RankPrediction n = predict_worst_rank(j, m, in_node);
        CHECK(predict_time(j, m, in_node, n).comm.tp == doctest::Approx(n.bytes.tp / m.intra_bw));
        // appendix C: DP's all-reduce hides behind the last backward when its ratio is <= 1, else the rest shows
        CHECK(tw.exposed.dp == doctest::Approx(std::max(0.0, tw.comm.dp - tw.comm.dp / tw.ratio.dp)));
    }

    TEST_CASE("the ranking follows the three steps: fit memory, then reach the batch, then throughput") {
        const Machine m = machine_preset("h100");
        const Job j = job_of("llama3-8b", 4096, 64);
        SearchSpace s;
        s.micro_batch = {1, 2, 4};
        const std::vector<Candidate> r = enumerate_and_rank(j, m, 16, s);
        REQUIRE(r.size() > 100);
        size_t fit = 0;
        while (fit < r.size() && r[fit].fits) fit++;
        CHECK(fit > 0);
        CHECK(fit < r.size());  // some do not fit: step 1 had work to do
        for (size_t i = fit; i < r.size(); i++) CHECK_FALSE(r[i].fits);
        for (size_t i = 0; i < fit; i++) {
            CHECK(r[i].reaches_batch);  // the enumeration only makes layouts that reach it
            CHECK(r[i].worst.total() <= m.gpu_memory);
            if (i > 0) CHECK(r[i].time.tokens_per_s <= r[i - 1].time.tokens_per_s * 1.006);
        }
        const std::string why = explain_choice(r, m);
        CHECK(why.find(strfmt("step 1, fit memory: %zu of %zu", fit, r.size())) != std::string::npos);
        CHECK(why.find("step 3, maximise throughput: " + r[0].layout.str()) != std::string::npos);
    }

    TEST_CASE("published example: Llama 3 8B on 64 H100s (8 nodes), seq 4096, 1M tokens: no tp, no pp") {
        // the playbook: below 10B one kind of parallelism is enough (DP with ZeRO, or TP inside a node)
        const Machine m = machine_preset("h100");
        const std::vector<Candidate> r = enumerate_and_rank(job_of("llama3-8b", 4096, 256), m, 64);
        REQUIRE_FALSE(r.empty());
        const Layout& top = r[0].layout;
        MESSAGE("8B on 64 H100: " << top.str());
        CHECK(r[0].fits);
        CHECK(top.grid.tp == 1);
        CHECK(top.grid.pp == 1);
        CHECK(top.grid.dp == 64);
        // and on one node it must shard: the 128.5 GB of model state do not fit an 80 GB GPU
        const std::vector<Candidate> one = enumerate_and_rank(job_of("llama3-8b", 4096, 64), m, 8);
        REQUIRE_FALSE(one.empty());
        CHECK(one[0].fits);
        CHECK((one[0].layout.zero > 0 || one[0].layout.grid.tp > 1 || one[0].layout.grid.pp > 1));
    }

    TEST_CASE("published example: Llama 3 70B on 512 H100s: tp 8 inside the node") {
        // the playbook: 10B-100B takes tp 8 (+ pp or ZeRO) with tp kept on NVLink
        const Machine m = machine_preset("h100");
        SearchSpace s;
        s.micro_batch = {1, 2};
        s.zero = {1, 2};
        const std::vector<Candidate> r = enumerate_and_rank(job_of("llama3-70b", 4096, 256), m, 512, s);
        REQUIRE_FALSE(r.empty());
        MESSAGE("70B on 512 H100: " << r[0].layout.str());
        CHECK(r[0].fits);
        CHECK(r[0].layout.grid.tp == 8);
        // no layout with tp 1 fits without pp: 70B's model state divided by ZeRO alone leaves the weights whole
        for (const Candidate& c : r)
            if (c.layout.grid.tp == 1 && c.layout.grid.pp == 1) CHECK_FALSE(c.fits);
    }
}
