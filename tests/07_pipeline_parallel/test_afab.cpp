// test_afab.cpp — chapter 07, AFAB (GPipe) on its own: every stage's list is every forward, then every backward,
// in micro-batch order; the checker takes it; on the logical clock each stage holds all m micro-batches at once
// and idles (p-1)/m of its work. No other schedule is made or compared here, so this grades workshop exercise
// 07.2 (tests/exercises/07_pipeline_parallel.txt) alone; test_schedules.cpp checks AFAB beside the others.
// Playbook: "Pipeline parallelism" (AFAB: all forward, all backward). Run: `make test CH=07`, or
//   build/bin/tests_07 -ts='ch07 np1' -tc='AFAB alone*'
#include "../../07_pipeline_parallel/tools/pipeline_clock.hpp"
#include "../../common/formulas.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

std::string ops_str(const std::vector<PipeOp>& ops) {
    std::string s;
    for (const PipeOp& op : ops) s += (s.empty() ? "" : ", ") + pipe_op_str(op);
    return s;
}

}  // namespace

TEST_SUITE("ch07 np1") {
    TEST_CASE("AFAB alone: every forward then every backward on each stage; m micro-batches in flight, bubble (p-1)/m") {
        for (int p = 1; p <= 4; p++)
            for (int m = 1; m <= 8; m++) {
                CAPTURE(p);
                CAPTURE(m);
                const PipelinePlan P = make_pipeline_plan(PipeScheduleKind::afab, p, m);  // checks it
                std::vector<PipeOp> want;
                for (int j = 0; j < m; j++) want.push_back({PipeOpKind::F, j, 0});
                for (int j = 0; j < m; j++) want.push_back({PipeOpKind::BW, j, 0});
                REQUIRE(P.ops.size() == (size_t)p);
                for (int i = 0; i < p; i++) CHECK(ops_str(P.ops[i]) == ops_str(want));
                const LogicalClock L = replay(P, P.ops, {});
                for (int i = 0; i < p; i++) {
                    CHECK(L.peak_in_flight[i] == pipeline_in_flight_afab(m));
                    CHECK(L.bubble(i) == doctest::Approx(pipeline_bubble_1f1b(p, m)).epsilon(1e-12));  // AFAB's too
                }
            }
    }
}
