// test_straggler.cpp — the straggler report's rule (common/straggler.hpp): a window median that adapts, the
// factor and the floor, and one line per kPrintEvery steps with the rest counted. Run: `make test CH=00`.
#include "../../common/straggler.hpp"
#include "../testing.hpp"

using namespace penta;

TEST_SUITE("ch00 np1") {
TEST_CASE("straggler: a slow step is flagged against the median of the recent steps, not of every step") {
    SlowSteps rule;
    CHECK_FALSE(rule.judge(1, 10.0).flagged);  // step 1 (first-touch allocations) is no reference
    for (int64_t s = 2; s <= 6; s++) CHECK_FALSE(rule.judge(s, 0.1).flagged);  // 5 steps of history
    const SlowSteps::Verdict v = rule.judge(7, 0.5);
    CHECK(v.flagged);
    CHECK(v.print);
    CHECK(v.median == doctest::Approx(0.1));
    CHECK_FALSE(rule.judge(8, 0.29).flagged);    // under 3x the median
    CHECK_FALSE(rule.judge(9, 0.1).flagged);
    // the machine becomes 4x slower for good: after a window of the new pace nothing is flagged any more
    int flagged = 0;
    for (int64_t s = 10; s < 10 + 64; s++) flagged += rule.judge(s, 0.4).flagged;
    CHECK(flagged > 0);                        // at first the new pace stands out...
    CHECK(flagged <= (int)SlowSteps::kWindow / 2 + 1);  // ... until the window's median follows it
    CHECK_FALSE(rule.judge(100, 0.5).flagged);
    CHECK(rule.judge(101, 1.3).flagged);       // 3x the new median and more than the floor
}

TEST_CASE("straggler: delays under the floor are noise, however large the ratio") {
    SlowSteps rule;
    for (int64_t s = 2; s <= 10; s++) rule.judge(s, 0.001);
    CHECK_FALSE(rule.judge(11, 0.04).flagged);  // 40x, but 39 ms: the scheduler's noise
    CHECK(rule.judge(12, 0.06).flagged);
}

TEST_CASE("straggler: one line per kPrintEvery steps; the steps held back are counted") {
    SlowSteps rule;
    for (int64_t s = 2; s <= 10; s++) rule.judge(s, 0.01);
    CHECK(rule.judge(11, 1.0).print);  // the first is printed
    int64_t printed = 0, held = 0, first_held = 0;
    for (int64_t s = 12; s < 11 + SlowSteps::kPrintEvery; s++) {  // every 4th step slow: the median stays 0.01
        const bool slow = s % 4 == 0;
        const SlowSteps::Verdict v = rule.judge(s, slow ? 1.0 : 0.01);
        CHECK(v.flagged == slow);
        if (slow && !first_held) first_held = s;
        printed += v.print;
        held += v.flagged && !v.print;
    }
    CHECK(printed == 0);
    CHECK(rule.unprinted() == held);
    CHECK(rule.unprinted_since() == first_held);
    const SlowSteps::Verdict v = rule.judge(11 + SlowSteps::kPrintEvery, 1.0);  // the limit has passed
    CHECK(v.print);
    CHECK(v.unprinted == held);  // said on this line
    CHECK(v.unprinted_since == first_held);
    CHECK(rule.unprinted() == 0);
}

TEST_CASE("straggler: one rank is never watched") {
    StragglerWatch watch(nullptr);
    for (int64_t s = 1; s <= 20; s++) {
        const StragglerWatch::Verdict v = watch.after_step(s, s == 15 ? 5.0 : 0.01, 0);
        CHECK_FALSE(v.flagged);
        CHECK_FALSE(v.print);
    }
    CHECK(watch.closing_line().empty());
}
}
