// bench/comm_timing.hpp — how the communication benchmarks time a collective (bench/comm.cpp,
// bench/comm_scaling.cpp): the best over --reps of the SLOWEST rank's time of one call, after one warm-up call,
// each call started from a barrier so that no rank's late arrival is counted as the collective's time.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>

#include "../common/comm.hpp"

namespace penta {

// prepare (if given) runs before each call's barrier, untimed: e.g. refilling the buffer the call overwrites
inline double best_seconds(Comm& comm, int64_t reps, const std::function<void()>& op,
                           const std::function<void()>& prepare = {}) {
    double best = 1e30;
    for (int64_t r = -1; r < reps; r++) {  // r = -1: warm-up, not counted
        if (prepare) prepare();
        comm.barrier();
        auto t0 = std::chrono::steady_clock::now();
        op();
        const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double slowest = comm.all_reduce_scalar(local, ReduceOp::max);
        if (r >= 0) best = std::min(best, slowest);
    }
    return best;
}

}  // namespace penta
