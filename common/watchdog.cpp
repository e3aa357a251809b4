// watchdog.cpp — deadlines on Comm's blocking waits and the report when one passes (watchdog.hpp).
// Test: `bash tests/02_data_parallel/watchdog_test.sh` (4 ranks, rank 2 hangs at step 3, --comm-timeout 5).
#include "watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "core.hpp"
#include "runtime.hpp"

namespace penta {

namespace {
double g_timeout = kDefaultCommTimeout;
double g_blocked = 0;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Step 2 of the file comment: tell every other rank what this one waits for, listen for theirs. Returns
// "rank 0 (all_reduce on group dp ...), ..." and fills `silent` with the ranks never heard from.
std::string exchange_reports(const std::string& mine, double grace, std::vector<int>& silent) {
    std::string waiting;
#if defined(PENTA_MPI)
    const int me = world_rank(), n = world_size();
    if (!mpi_enabled() || n <= 1) return waiting;
    // the sends are never waited for (the job is about to end): the buffer must outlive them
    static std::string sent;
    sent = mine.substr(0, 480);
    for (int r = 0; r < n; r++) {
        if (r == me) continue;
        MPI_Request req;
        if (MPI_Isend(sent.c_str(), (int)sent.size() + 1, MPI_CHAR, r, kWatchdogTag, MPI_COMM_WORLD, &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
    }
    std::vector<bool> heard(n, false);
    heard[me] = true;
    int count = 1;
    const Clock::time_point t0 = Clock::now();
    while (count < n && since(t0) < grace) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, kWatchdogTag, MPI_COMM_WORLD, &flag, &st);
        if (!flag) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            continue;
        }
        char buf[512] = {};
        MPI_Recv(buf, sizeof buf - 1, MPI_CHAR, st.MPI_SOURCE, kWatchdogTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (!heard[st.MPI_SOURCE]) count++;
        heard[st.MPI_SOURCE] = true;
        waiting += strfmt("\n    rank %d: %s", st.MPI_SOURCE, buf);
    }
    for (int r = 0; r < n; r++)
        if (!heard[r]) silent.push_back(r);
#else
    (void)mine;
    (void)grace;
    (void)silent;
#endif
    return waiting;
}

[[noreturn]] void expire(const std::string& what, double waited, const std::function<void()>& on_expiry) {
    if (on_expiry) on_expiry();
    const int me = world_rank();
    const std::string mine = strfmt("%s, waiting %.1f s", what.c_str(), waited);
    const double grace = std::clamp(0.2 * g_timeout, 1.0, 10.0);
    std::fprintf(stderr, "[rank %d] watchdog: %s has waited %.1f s, past --comm-timeout %g; asking the other ranks "
                 "what they wait for (%.0f s)\n", me, what.c_str(), waited, g_timeout, grace);
    std::vector<int> silent;
    const std::string waiting = exchange_reports(mine, grace, silent);
    std::string report = strfmt("[rank %d] watchdog: %s waited %.1f s (--comm-timeout %g)", me, what.c_str(), waited,
                                g_timeout);
    if (!waiting.empty()) report += "\n  waiting too:" + waiting;
    if (!silent.empty()) {
        std::string ranks;
        for (int r : silent) ranks += strfmt("%s%d", ranks.empty() ? "" : ", ", r);
        report += strfmt("\n  did not arrive: rank%s %s (no word from %s within %.0f s: stuck, dead, or busy "
                         "outside communication)", silent.size() > 1 ? "s" : "", ranks.c_str(),
                         silent.size() > 1 ? "them" : "it", grace);
    } else if (world_size() > 1) {
        report += "\n  every rank is waiting: the ranks disagree on the order of their collectives (a deadlock)";
    }
    std::fprintf(stderr, "%s\n  aborting the job\n", report.c_str());
    abort_job(1);
}
}  // namespace

void set_comm_timeout(double seconds) { g_timeout = seconds; }
double comm_timeout() { return g_timeout; }
double comm_blocked_seconds() { return g_blocked; }

void wait_until(const std::function<bool()>& done, const std::function<std::string()>& what,
                const std::function<void()>& on_expiry) {
    if (done()) return;  // the common case: finished already, no clock read
    const Clock::time_point t0 = Clock::now();
    for (;;) {
        if (done()) break;
        const double waited = since(t0);
        if (g_timeout > 0 && waited > g_timeout) expire(what(), waited, on_expiry);
        // spin the first second, as MPI_Waitall would; a longer wait is no longer latency-bound: poll at 1 kHz
        if (waited > 1.0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    g_blocked += since(t0);
}

std::string group_members_str(const std::vector<int>& world_ranks) {
    std::string s = strfmt("%zu rank%s", world_ranks.size(), world_ranks.size() == 1 ? "" : "s");
    if (world_ranks.empty()) return s;
    s += ": world rank" + std::string(world_ranks.size() > 1 ? "s" : "");
    for (size_t i = 0; i < world_ranks.size() && i < 16; i++) s += strfmt(" %d", world_ranks[i]);
    if (world_ranks.size() > 16) s += " ...";
    return s;
}

}  // namespace penta
