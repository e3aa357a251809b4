// straggler.cpp — see straggler.hpp. Playbook: "5D parallelism in a nutshell". Run: see straggler.hpp.
#include "straggler.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core.hpp"

namespace penta {

SlowSteps::Verdict SlowSteps::judge(int64_t step, double seconds) {
    Verdict v;
    if (step < 2) return v;  // step 1 pays for first-touch allocations: not a reference
    if (window_.size() >= kMinHistory) {
        std::vector<double> t(window_.begin(), window_.end());
        std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
        v.median = t[t.size() / 2];
        v.flagged = seconds > kFactor * v.median && seconds - v.median > kMinSeconds;
    }
    window_.push_back(seconds);
    if (window_.size() > kWindow) window_.pop_front();
    if (!v.flagged) return v;
    if (step - last_printed_ >= kPrintEvery) {
        v.print = true;
        v.unprinted = unprinted_;
        v.unprinted_since = unprinted_since_;
        last_printed_ = step;
        unprinted_ = 0;
    } else {
        if (unprinted_ == 0) unprinted_since_ = step;
        unprinted_++;
    }
    return v;
}

StragglerWatch::Verdict StragglerWatch::after_step(int64_t step, double seconds, double blocked) {
    Verdict v;
    if (!world_) return v;
    // (work in µs, rank) as one double, so one max-reduce finds both: exact while < 2^52, so the µs are
    // capped at 2^32 - 1 (71 minutes) and ranks at 2^20
    const double work = std::max(0.0, seconds - blocked);
    const double us = std::min(std::floor(work * 1e6), 4294967295.0);
    const double code = world_->all_reduce_scalar(us * kRanks + std::fmod(world_->rank(), kRanks), ReduceOp::max);
    static_cast<SlowSteps::Verdict&>(v) = rule_.judge(step, seconds);
    v.rank = (int)std::fmod(code, kRanks);
    v.work = std::floor(code / kRanks) / 1e6;
    return v;
}

std::string StragglerWatch::line(int64_t step, double seconds, const Verdict& v) {
    std::string s = strfmt("straggler: step %ld took %.3f s, %.1fx the median %.3f s of the last steps; rank %d worked "
                           "longest (%.3f s; the others waited for it)",
                           (long)step, seconds, seconds / v.median, v.median, v.rank, v.work);
    if (v.unprinted > 0)
        s += strfmt(" [%ld more slow step(s) from step %ld not printed: one line per %ld steps]", (long)v.unprinted,
                    (long)v.unprinted_since, (long)SlowSteps::kPrintEvery);
    return s;
}

std::string StragglerWatch::closing_line() const {
    if (rule_.unprinted() == 0) return "";
    return strfmt("straggler: %ld more slow step(s) from step %ld not printed (one line per %ld steps)",
                  (long)rule_.unprinted(), (long)rule_.unprinted_since(), (long)SlowSteps::kPrintEvery);
}

}  // namespace penta
