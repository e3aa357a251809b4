// straggler.hpp — the straggler report: which step was slow, and which rank the others waited for.
//
// Playbook: "5D parallelism in a nutshell" (a job runs at the pace of its slowest rank) and seed 003's
// fault-tolerance section (stragglers do not report themselves: watch every rank's step time).
// Run: `mpirun -np 4 build/bin/02_data_parallel --dp 4 --inject-hang 1:9:1` flags step 9, naming rank 1
// (tests/02_data_parallel/watchdog_test.sh); tests/00_common/test_straggler.cpp tests the rule.
//
// The rule. A step is slow when it takes more than kFactor times the median of the last kWindow steps
// (from step 2 on: step 1 pays for first-touch allocations) and kMinSeconds more than it (shorter delays are
// the scheduler's noise). The median is over a window, not every step so far, so it follows a machine that
// becomes slower or faster for good. Only a job of more than one rank is watched: one rank waits for nobody,
// and its slow step is the machine's business, not a straggler. One line at most every kPrintEvery steps;
// the flagged steps in between are counted and said on the next line and at the end of the run.
#pragma once
#include <cstdint>
#include <deque>
#include <string>

#include "comm.hpp"

namespace penta {

class SlowSteps {  // the rule alone: no communication (the test drives it with made-up times)
   public:
    static constexpr double kFactor = 3, kMinSeconds = 0.05;
    static constexpr size_t kWindow = 32, kMinHistory = 5;
    static constexpr int64_t kPrintEvery = 50;

    struct Verdict {
        bool flagged = false;  // the step was slow
        bool print = false;    // ... and a line is due (the rate limit allows one)
        double median = 0;     // of the window before this step (0 until kMinHistory steps)
        int64_t unprinted = 0; // flagged steps not printed since the last line (print: the ones before this)
        int64_t unprinted_since = 0;  // the first of them
    };
    Verdict judge(int64_t step, double seconds);
    // flagged steps never printed (the rate limit held them back); the run's closing line says them
    int64_t unprinted() const { return unprinted_; }
    int64_t unprinted_since() const { return unprinted_since_; }

   private:
    std::deque<double> window_;  // the last kWindow step times, from step 2 on
    int64_t last_printed_ = -kPrintEvery;
    int64_t unprinted_ = 0, unprinted_since_ = 0;
};

class StragglerWatch {
   public:
    // world: every rank of the job; nullptr or one rank: nothing is watched
    explicit StragglerWatch(Comm* world) : world_(world && world->size() > 1 ? world : nullptr) {}
    struct Verdict : SlowSteps::Verdict {
        int rank = 0;     // the rank that worked longest in the step
        double work = 0;  // its step time less its time blocked in Comm waits
    };
    // every rank calls it once per step (a collective over the world: one max-reduce)
    Verdict after_step(int64_t step, double seconds, double blocked);
    // rank 0's line for a verdict that is due, and the run's closing line ("" when nothing was held back)
    static std::string line(int64_t step, double seconds, const Verdict& v);
    std::string closing_line() const;

   private:
    static constexpr double kRanks = 1048576;  // 2^20
    Comm* world_;
    SlowSteps rule_;
};

}  // namespace penta
