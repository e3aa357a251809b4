// test_schedules.cpp — chapter 07, schedules as data, on one rank: every schedule's lists pass the checker; the
// checker refuses a hand-made deadlock, lists whose inputs do not exist and lists whose messages arrive out of
// order, naming the stage and the op; on the logical clock the bubble of AFAB and 1F1B is (p-1)/m, interleaved's
// (p-1)/(v·m) (m a multiple of p; a short last round of micro-batches idles a fixed time more, from two full
// rounds on whatever m),
// ZB-H1's (p-1)(F+B-W)/(m(F+B+W)) — exactly — and DualPipe's below its bound and below ZB-H1's; the
// micro-batches in flight are m (AFAB), p-i (1F1B), p (ZB-H1), interleaved's warm-up + 1, p+1 (DualPipe); the ASCII
// timeline; the layer split and each stage's slice.
// Playbook: "Pipeline parallelism". Run: `make test CH=07`, or build/bin/tests_07 -ts='ch07 np1'
#include "../../07_pipeline_parallel/tools/pipeline_clock.hpp"
#include "../../common/formulas.hpp"
#include "../../common/grid.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

// the ops as they are listed (the executor runs exactly the lists)
LogicalClock clock_of(const PipelinePlan& P, const LogicalCosts& c = {}) { return replay(P, P.ops, c); }

std::string refusal(const PipelinePlan& P) { return error_of([&] { check_plan(P); }); }

PipeOp op(PipeOpKind k, int mb, int chunk = 0) { return PipeOp{k, mb, chunk}; }

}  // namespace

TEST_SUITE("ch07 np1") {

TEST_CASE("schedules: every list of every schedule passes the checker, each micro-batch through every virtual stage") {
    int plans = 0;
    for (int p = 1; p <= 5; p++)
        for (int m = 1; m <= 12; m++)
            for (PipeScheduleKind k : {PipeScheduleKind::afab, PipeScheduleKind::one_f_one_b, PipeScheduleKind::zb1,
                                       PipeScheduleKind::interleaved, PipeScheduleKind::dualpipe})
                for (int v : {1, 2, 3}) {
                    if ((v > 1) != (k == PipeScheduleKind::interleaved)) continue;
                    if (k == PipeScheduleKind::dualpipe && p % 2) continue;
                    CAPTURE(pipe_schedule_name(k));
                    CAPTURE(p);
                    CAPTURE(m);
                    CAPTURE(v);
                    const PipelinePlan P = make_pipeline_plan(k, p, m, v);  // checks it
                    int64_t ops = 0;
                    for (const auto& l : P.ops) ops += (int64_t)l.size();
                    const int per = k == PipeScheduleKind::zb1 ? 3 : 2;  // F + BW, or F + B + W
                    if (k != PipeScheduleKind::dualpipe) CHECK(ops == (int64_t)per * m * P.virtual_stages);
                    else CHECK(ops >= 2 * m * p);  // F + BW, or F + B + W, for every micro-batch on every stage
                    plans++;
                }
    CHECK(plans > 200);
}

TEST_CASE("schedules: the checker refuses a hand-made deadlock, naming each stuck stage and op") {
    // stage 0 waits for micro-batch 0's gradient before it sends micro-batch 1's activation; stage 1 runs both
    // forwards before its first backward: each waits for the other
    PipelinePlan P = generate_pipeline_plan(PipeScheduleKind::one_f_one_b, 2, 2);
    P.ops[0] = {op(PipeOpKind::F, 0), op(PipeOpKind::BW, 0), op(PipeOpKind::F, 1), op(PipeOpKind::BW, 1)};
    P.ops[1] = {op(PipeOpKind::F, 0), op(PipeOpKind::F, 1), op(PipeOpKind::BW, 0), op(PipeOpKind::BW, 1)};
    const std::string e = refusal(P);
    INFO(e);
    CHECK(contains(e, "deadlock"));
    CHECK(contains(e, "stage 0, op 1 (BW mb 0 chunk 0) waits for micro-batch 0's gradient for virtual stage 0 from stage 1, "
                      "which sends it at its op 2 (BW mb 0 chunk 0) but is stuck at its op 1"));
    CHECK(contains(e, "stage 1, op 1 (F mb 1 chunk 0) waits for micro-batch 1's activation for virtual stage 1 from stage 0, "
                      "which sends it at its op 2 (F mb 1 chunk 0) but is stuck at its op 1"));
    // the same lists in 1F1B's order run
    CHECK(refusal(generate_pipeline_plan(PipeScheduleKind::one_f_one_b, 2, 2)) == "");
}

TEST_CASE("schedules: the checker refuses ops whose inputs do not exist, repeated and missing ops") {
    auto with = [](int stage, std::vector<PipeOp> ops, PipeScheduleKind k = PipeScheduleKind::zb1) {
        PipelinePlan P = generate_pipeline_plan(k, 2, 2);
        P.ops[stage] = std::move(ops);
        return refusal(P);
    };
    using K = PipeOpKind;
    CHECK(contains(with(0, {op(K::B, 0), op(K::F, 0)}), "stage 0, op 0 (B mb 0 chunk 0): its input does not exist: the "
                                                           "forward of micro-batch 0 has not run"));
    CHECK(contains(with(1, {op(K::F, 0), op(K::W, 0), op(K::B, 0)}), "stage 1, op 1 (W mb 0 chunk 0): its input does not "
                                                                      "exist: no B of micro-batch 0"));
    CHECK(contains(with(1, {op(K::F, 0), op(K::BW, 0), op(K::W, 0)}, PipeScheduleKind::one_f_one_b), "stage 1, op 2 (W mb 0 chunk 0): "
                                                                                       "its input does not exist"));
    CHECK(contains(with(0, {op(K::F, 0), op(K::F, 0)}), "stage 0, op 1 (F mb 0 chunk 0) runs again: the stage ran it as "
                                                          "its op 0"));
    CHECK(contains(with(0, {op(K::F, 0), op(K::F, 1, 1)}), "stage 0, op 1 (F mb 1 chunk 1): no such micro-batch or chunk"));
    // DualPipe's micro-batch 0 goes down, through chunk 0 of every stage only
    CHECK(contains(with(0, {op(K::F, 0, 1)}, PipeScheduleKind::dualpipe),
                   "micro-batch 0 (direction 0) never visits chunk 1 of stage 0"));
    CHECK(contains(with(1, {op(K::F, 0), op(K::B, 0), op(K::W, 0)}), "stage 1 never runs the F of micro-batch 1"));
}

TEST_CASE("schedules: rules the generators need, and the checker's reasons for them") {
    // interleaved: with full rounds of p micro-batches the played lists are Megatron-LM's order as wanted; with a
    // short last round, run as wanted, stage 0 of 2 would receive from stage 1 in another order than it sends
    // (m 5), and 4 stages with 3 chunks would deadlock: the play runs some backwards early
    for (int p = 1; p <= 5; p++)
        for (int m = 1; m <= 12; m++)
            for (int v : {2, 3}) {
                CAPTURE(p);
                CAPTURE(m);
                CAPTURE(v);
                const PipelinePlan P = make_pipeline_plan(PipeScheduleKind::interleaved, p, m, v);
                if (m % p == 0) CHECK(P.departures == 0);
            }
    CHECK(make_pipeline_plan(PipeScheduleKind::interleaved, 2, 5, 2).departures > 0);
    CHECK(make_pipeline_plan(PipeScheduleKind::interleaved, 4, 5, 3).departures > 0);
    CHECK(contains(error_of([] { make_pipeline_plan(PipeScheduleKind::dualpipe, 3, 6); }),
                   "--pp 3 (odd) the middle stage would pair with itself"));
    // DualPipe with m odd or below 2p - 2 is played (greedy): ceil(m/2) micro-batches down, floor(m/2) up
    const PipelinePlan D = make_pipeline_plan(PipeScheduleKind::dualpipe, 4, 5);
    CHECK((D.direction == std::vector<int>{0, 0, 0, 1, 1}));
    CHECK(contains(error_of([] { make_pipeline_plan(PipeScheduleKind::one_f_one_b, 2, 4, 2); }), "--pp-chunks 2"));
    CHECK(contains(error_of([] { parse_pipe_schedule("gpipe"); }), "--pp-schedule 'gpipe' must be afab, 1f1b"));
}

TEST_CASE("logical clock: the bubble of every schedule beside its formula, exactly") {
    for (int p = 2; p <= 4; p++)
        for (int m : {p, 2 * p, 2 * p + 1, 8}) {
            CAPTURE(p);
            CAPTURE(m);
            for (PipeScheduleKind k : {PipeScheduleKind::afab, PipeScheduleKind::one_f_one_b}) {
                const PipelinePlan P = make_pipeline_plan(k, p, m);
                const LogicalClock L = clock_of(P);
                // playbook: 000.08.2 003.4.1 — logical clock: 1F1B's bubble = (p-1)/m exactly
                for (int r = 0; r < p; r++) CHECK(L.bubble(r) == doctest::Approx(pipeline_bubble_1f1b(p, m)).epsilon(1e-12));
            }
            // ZB-H1 with F = B = W, and with B, F slower than W (the formula holds for W <= F)
            for (LogicalCosts c : {LogicalCosts{1, 1, 1}, LogicalCosts{1, 2, 1}, LogicalCosts{2, 1, 1}}) {
                const LogicalClock L = clock_of(make_pipeline_plan(PipeScheduleKind::zb1, p, m), c);
                const LogicalClock one = clock_of(make_pipeline_plan(PipeScheduleKind::one_f_one_b, p, m), c);
                for (int r = 0; r < p; r++) {
                    CHECK(L.bubble(r) == doctest::Approx(pipeline_bubble_zb1(p, m, c.f, c.b, c.w)).epsilon(1e-12));
                    CHECK(L.bubble(r) < one.bubble(r));  // ZB-H1 below 1F1B
                }
            }
            for (int v : {2, 3}) {
                const LogicalClock L = clock_of(make_pipeline_plan(PipeScheduleKind::interleaved, p, m, v));
                if (m % p == 0)
                    for (int r = 0; r < p; r++)
                        // playbook: 000.08.4 — logical clock: interleaved bubble = (p-1)/(v·m)
                        CHECK(L.bubble(r) == doctest::Approx(pipeline_bubble_interleaved(p, m, v)).epsilon(1e-12));
                else {
                    // a short last round idles longer than the formula, by the same time whatever the number of
                    // full rounds before it (from two on): p more micro-batches add p·v·3 units of work, no idle
                    const LogicalClock more = clock_of(make_pipeline_plan(PipeScheduleKind::interleaved, p, m + p, v));
                    for (int r = 0; r < p; r++) {
                        CHECK(L.bubble(r) > pipeline_bubble_interleaved(p, m, v));
                        CHECK(L.makespan - L.busy[r] == more.makespan - more.busy[r]);
                        CHECK(more.busy[r] == L.busy[r] + 3 * p * v);
                    }
                }
            }
            if (p % 2 == 0 && m % 2 == 0 && m >= 2 * p) {
                const LogicalClock L = clock_of(make_pipeline_plan(PipeScheduleKind::dualpipe, p, m));
                const LogicalClock zb = clock_of(make_pipeline_plan(PipeScheduleKind::zb1, p, m));
                for (int r = 0; r < p; r++) {
                    // playbook: 000.08.9 — logical clock: DualPipe's two streams bring the bubble under its bound and
                    //   below ZB-H1's
                    CHECK(L.bubble(r) <= pipeline_bubble_dualpipe_bound(p, m, 1, 1, 1) + 1e-12);
                    CHECK(L.bubble(r) < zb.bubble(r));
                }
            }
        }
    // DualPipe played (m odd or below 2p - 2) at p 2 and 4: below ZB-H1 from two micro-batches on, within
    // DeepSeek's bound from max(2, p - 1) on (the bound is written for many micro-batches)
    for (int p : {2, 4})
        for (int m = 1; m <= 13; m++) {
            if (m % 2 == 0 && m >= 2 * p - 2) continue;
            CAPTURE(p);
            CAPTURE(m);
            const LogicalClock L = clock_of(make_pipeline_plan(PipeScheduleKind::dualpipe, p, m));
            const LogicalClock zb = clock_of(make_pipeline_plan(PipeScheduleKind::zb1, p, m));
            for (int r = 0; r < p; r++) {
                if (m >= 2) CHECK(L.bubble(r) < zb.bubble(r));
                else CHECK(L.bubble(r) == zb.bubble(r));  // one micro-batch: one direction, ZB-H1's order
                if (m >= std::max(2, p - 1)) CHECK(L.bubble(r) <= pipeline_bubble_dualpipe_bound(p, m, 1, 1, 1) + 1e-12);
            }
        }
}

TEST_CASE("logical clock: micro-batches in flight per stage beside the formulas (1F1B: p - i)") {
    for (int p = 1; p <= 5; p++)
        for (int m = 1; m <= 10; m++) {
            CAPTURE(p);
            CAPTURE(m);
            const LogicalClock afab = clock_of(make_pipeline_plan(PipeScheduleKind::afab, p, m));
            const LogicalClock one = clock_of(make_pipeline_plan(PipeScheduleKind::one_f_one_b, p, m));
            const LogicalClock zb = clock_of(make_pipeline_plan(PipeScheduleKind::zb1, p, m));
            for (int i = 0; i < p; i++) {
                // playbook: 000.08.3 003.4.2 — logical clock: AFAB holds m micro-batches, 1F1B p - i on stage i
                CHECK(afab.peak_in_flight[i] == pipeline_in_flight_afab(m));
                CHECK(one.peak_in_flight[i] == pipeline_in_flight_1f1b(p, i, m));
                CHECK(zb.peak_in_flight[i] == pipeline_in_flight_zb1(p, m));
            }
            for (int v : {2, 3}) {  // a short round: the backwards the play runs early only lower the peak
                const LogicalClock il = clock_of(make_pipeline_plan(PipeScheduleKind::interleaved, p, m, v));
                for (int i = 0; i < p; i++) {
                    if (m % p == 0) CHECK(il.peak_in_flight[i] == pipeline_in_flight_interleaved(p, i, m, v));
                    else CHECK(il.peak_in_flight[i] <= pipeline_in_flight_interleaved(p, i, m, v));
                }
            }
            if (p % 2 == 0 && m % 2 == 0 && m >= 2 * p) {
                const LogicalClock d = clock_of(make_pipeline_plan(PipeScheduleKind::dualpipe, p, m));
                for (int i = 0; i < p; i++) CHECK(d.peak_in_flight[i] == pipeline_in_flight_dualpipe(p));
            }
            if (p % 2 == 0 && (m % 2 || m < 2 * p - 2)) {  // played: at most p + 1, as the steps hold
                const LogicalClock d = clock_of(make_pipeline_plan(PipeScheduleKind::dualpipe, p, m));
                for (int i = 0; i < p; i++) CHECK(d.peak_in_flight[i] <= pipeline_in_flight_dualpipe(p));
            }
        }
}

TEST_CASE("logical clock: the ASCII timeline of 1F1B on 2 stages, 2 micro-batches") {
    const PipelinePlan P = make_pipeline_plan(PipeScheduleKind::one_f_one_b, 2, 2);
    const LogicalClock L = clock_of(P);
    CHECK(L.makespan == 9);  // 3 (m + p - 1) units
    const std::string t = ascii_timeline(P, P.ops, L, {});
    INFO(t);
    // stage 0 forwards at 0, 1; its backwards wait for stage 1's (2-4, 5-7): 4-6 and 7-9
    CHECK(contains(t, "  stage 0 |F0 F1 .  .  B0----.  B1----\n"));
    CHECK(contains(t, "  stage 1 |.  F0 B0----F1 B1----.  .\n"));
    const PipelinePlan I = make_pipeline_plan(PipeScheduleKind::interleaved, 2, 2, 2);
    CHECK(contains(ascii_timeline(I, I.ops, clock_of(I), {}), "F0a"));  // the chunk as a letter
}

TEST_CASE("stages: the layers cut into virtual stages, and each stage's slice") {
    CHECK(split_layers(8, 4, {}).size() == 4);
    const std::vector<LayerRange> uneven = split_layers(7, 3, parse_layer_sizes("3,3,1"));
    CHECK(uneven[1].begin == 3);
    CHECK(uneven[2].end == 7);
    const std::vector<LayerRange> even = split_layers(7, 3, {});  // the first 7 % 3 pieces one more
    CHECK((even[0].end == 3 && even[1].end == 5 && even[2].end == 7));
    CHECK(contains(error_of([] { split_layers(4, 3, parse_layer_sizes("2,2")); }), "--pp-layers lists 2 stages"));
    CHECK(contains(error_of([] { split_layers(4, 2, parse_layer_sizes("3,2")); }), "adds up to 5 layers; the model has 4"));
    CHECK(contains(error_of([] { split_layers(2, 4, {}); }), "the model has 2 layers, fewer than the pipeline's 4"));
    CHECK(contains(error_of([] { parse_layer_sizes("3,0"); }), "--pp-layers '3,0'"));
    // every comma separates two entries (an empty one is refused, not dropped); an entry is an int: no sum wraps
    for (const char* bad : {"2,2,", ",2", "2,,2", "", "2, 2"})
        CHECK(contains(error_of([&] { parse_layer_sizes(bad); }), "each entry must be a number of layers >= 1"));
    CHECK(contains(error_of([] { parse_layer_sizes("2,9223372036854775807"); }), "is out of range: at most 2147483647"));
    CHECK(contains(error_of([] { split_layers(4, 2, parse_layer_sizes("2147483647,2147483647")); }),
                   "adds up to 4294967294 layers; the model has 4"));
    // --pp × --pp-chunks beyond an int: the split refuses it by the layers (nothing is built before)
    CHECK(contains(error_of([] { split_layers(4, int64_t(2) * 2147483647, {}); }),
                   "the model has 4 layers, fewer than the pipeline's 4294967294 virtual stages"));
    CHECK(contains(error_of([] { check_pipeline_shape(PipeScheduleKind::one_f_one_b, 2, 3); }),
                   "--pp-chunks 3: only --pp-schedule interleaved"));

    // interleaved v 2 on 2 stages, 8 layers: stage 0 holds pieces 0 and 2, stage 1 pieces 1 and 3
    const PipelinePlan I = make_pipeline_plan(PipeScheduleKind::interleaved, 2, 2, 2);
    const std::vector<LayerRange> pieces = split_layers(8, 4, {});
    const PipelineSlice s0 = stage_slice(I, pieces, 0), s1 = stage_slice(I, pieces, 1);
    CHECK((s0.layer_begin == 0 && s0.layer_end == 2 && s0.more_chunks.size() == 1 && s0.more_chunks[0].begin == 4));
    CHECK((s0.has_embedding && !s0.has_head && !s1.has_embedding && s1.has_head));
    CHECK(s1.head_chunk(8) == 1);
    // DualPipe: stage s holds pieces s and p-1-s; the two ends hold the embedding and the head; the first half the
    // primary copies
    const PipelinePlan D = make_pipeline_plan(PipeScheduleKind::dualpipe, 4, 8);
    const std::vector<LayerRange> four = split_layers(8, 4, {});
    const PipelineSlice d0 = stage_slice(D, four, 0), d3 = stage_slice(D, four, 3), d1 = stage_slice(D, four, 1);
    CHECK((d0.has_embedding && d0.has_head && d3.has_embedding && d3.has_head && !d1.has_embedding));
    CHECK((d0.embedding_chunk() == 0 && d0.head_chunk(8) == 1 && d3.embedding_chunk() == 1 && d3.head_chunk(8) == 0));
    CHECK((d0.mirror == PipelineSlice::Mirror::primary && d3.mirror == PipelineSlice::Mirror::replica));
    // mirror stages build the same layers, so their flat buffers line up for the gradient sum; the replica's copy
    // is not counted in the gradient norm
    LlamaConfig c = preset("tiny");
    c.n_layers = 8;
    const ParamLayout l1 = ParamLayout::build(c, 1, 0, d1), l2 = ParamLayout::build(c, 1, 0, stage_slice(D, four, 2));
    REQUIRE(l1.tensors.size() == l2.tensors.size());
    CHECK(l1.numel == l2.numel);
    for (size_t i = 0; i < l1.tensors.size(); i++) {
        CHECK(l1.tensors[i].name == l2.tensors[i].name);
        CHECK(l1.tensors[i].offset == l2.tensors[i].offset);
        CHECK((l1.tensors[i].grad_summed_on & kAxisPP));
        GridCoords at1, at2;
        at1.pp = 1, at2.pp = 2;
        CHECK(counts_in_grad_norm(l1.tensors[i], at1));
        CHECK(!counts_in_grad_norm(l2.tensors[i], at2));
    }
}

}  // TEST_SUITE
