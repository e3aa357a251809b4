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
// A poll loop sleeps 1 ms between polls: a gap this long between two means this process did not run (stopped by
// SIGSTOP or a debugger, a suspended machine), and that time is no waiting time.
constexpr double kNotRunning = 2.0;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The messages ranks exchange on kWatchdogTag once a deadline passed (watchdog.hpp), a kind byte then text:
enum Kind : char {
    kWaiting = 'W',  // "I wait for this": sent by a rank whose deadline passed, and by one asked while it waits
    kStopped = 'S',  // "I did not run for part of my wait": no witness; counted with the ranks that did not arrive
    kVerdict = 'V',  // "I report the cause and abort the job": the others stay quiet
};
struct Message {
    int from = -1;
    char kind = 0;
    std::string text;
};

// sends kind + text to every other rank; never waited for (the job is about to end), so the buffers must
// outlive the sends: one per kind
void send_to_all(Kind kind, const std::string& text) {
#if defined(PENTA_MPI)
    const int me = world_rank(), n = world_size();
    if (!mpi_enabled() || n <= 1) return;
    static std::string sent[3];
    std::string& buf = sent[kind == kWaiting ? 0 : kind == kStopped ? 1 : 2];
    buf = std::string(1, (char)kind) + text.substr(0, 480);
    for (int r = 0; r < n; r++) {
        if (r == me) continue;
        MPI_Request req;
        if (MPI_Isend(buf.c_str(), (int)buf.size() + 1, MPI_CHAR, r, kWatchdogTag, MPI_COMM_WORLD, &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
    }
#else
    (void)kind;
    (void)text;
#endif
}

// one message of another rank's watchdog, if one has come
bool receive(Message* m) {
#if defined(PENTA_MPI)
    if (!mpi_enabled() || world_size() <= 1) return false;
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kWatchdogTag, MPI_COMM_WORLD, &flag, &st);
    if (!flag) return false;
    char buf[512] = {};
    MPI_Recv(buf, sizeof buf - 1, MPI_CHAR, st.MPI_SOURCE, kWatchdogTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    m->from = st.MPI_SOURCE;
    m->kind = buf[0];
    m->text = buf[0] ? buf + 1 : "";
    return true;
#else
    (void)m;
    return false;
#endif
}

// whether another rank's watchdog has written to this one (a deadline passed somewhere: the job is ending)
bool word_pending() {
#if defined(PENTA_MPI)
    if (!mpi_enabled() || world_size() <= 1) return false;
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, kWatchdogTag, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
#else
    return false;
#endif
}

// Another rank reports the cause and aborts the job: what this rank could add is not the first thing a reader
// should see (a rank stopped, and woken only by that abort, would even count itself among the waiting). It says
// nothing and waits for the job's end; should that not come, it aborts the job itself.
[[noreturn]] void abort_quietly() {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    abort_job(1);
}

// Steps 1-3 of the file comment. `originator`: this rank's own deadline passed (else another rank asked it while
// it waited). `not_running`: seconds of this wait during which the rank was not running; `resumed`: seconds since
// it last ran again (a large value when it never stopped).
[[noreturn]] void expire(const std::string& what, double waited, double not_running, double resumed, bool originator,
                         const std::function<void()>& on_expiry) {
    if (on_expiry) on_expiry();
    const int me = world_rank(), n = world_size();
    const double grace = std::clamp(0.2 * g_timeout, 1.0, 10.0);
    std::vector<Message> heard(n);  // per rank, its last word (kind 0: none)
    heard[me].kind = kWaiting;
    int count = 1;
    // what came before this rank spoke: a verdict means the job is already ending
    auto take = [&](const Message& m) {
        if (m.kind == kVerdict) abort_quietly();
        if (m.from < 0 || m.from >= n || m.from == me) return;
        count += heard[m.from].kind == 0;
        heard[m.from] = m;
    };
    for (Message m; receive(&m);) take(m);
    if (not_running > 0 && resumed < grace) {  // just woken: no witness of what the others did meanwhile
        send_to_all(kStopped, strfmt("%s; this rank did not run for %.1f s of its wait", what.c_str(), not_running));
        abort_quietly();
    }
    if (originator)
        std::fprintf(stderr, "[rank %d] watchdog: %s has waited %.1f s, past --comm-timeout %g; asking the other ranks "
                     "what they wait for (%.0f s)\n", me, what.c_str(), waited, g_timeout, grace);
    send_to_all(kWaiting, strfmt("%s, waiting %.1f s", what.c_str(), waited));
    const Clock::time_point t0 = Clock::now();
    while (count < n && since(t0) < grace) {
        Message m;
        if (receive(&m)) take(m);
        else std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // every rank waiting would say deadlock: first a moment for a verdict already on its way, from a rank whose
    // grace ended first (its abort is what wakes a stopped rank, which then answers too)
    const Clock::time_point t1 = Clock::now();
    while (count == n && since(t1) < 0.2) {
        Message m;
        if (receive(&m)) take(m);
        else std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    send_to_all(kVerdict, "");
    std::string report = strfmt("[rank %d] watchdog: %s waited %.1f s (--comm-timeout %g)", me, what.c_str(), waited,
                                g_timeout);
    std::string waiting, silent, stopped;
    for (int r = 0; r < n; r++) {
        if (r == me) continue;
        if (heard[r].kind == kWaiting) waiting += strfmt("\n    rank %d: %s", r, heard[r].text.c_str());
        else if (heard[r].kind == kStopped) stopped += strfmt("\n    rank %d: %s", r, heard[r].text.c_str());
        else silent += strfmt("%s%d", silent.empty() ? "" : ", ", r);
    }
    const size_t n_silent = silent.empty() ? 0 : std::count(silent.begin(), silent.end(), ',') + 1;
    if (!waiting.empty()) report += "\n  waiting too:" + waiting;
    if (!silent.empty())
        report += strfmt("\n  did not arrive: rank%s %s (no word from %s within %.0f s: stuck, stopped, dead, or busy "
                         "outside communication)", n_silent > 1 ? "s" : "", silent.c_str(),
                         n_silent > 1 ? "them" : "it", grace);
    if (!stopped.empty())
        report += "\n  did not arrive, as it was not running (stopped by a signal or a debugger, or its machine "
                  "suspended):" + stopped;
    if (silent.empty() && stopped.empty() && n > 1)
        report += "\n  every rank is waiting: the ranks disagree on the order of their collectives (a deadlock)";
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
    Clock::time_point last = t0, asked = t0, resumed = t0 - std::chrono::hours(1);
    double not_running = 0;  // seconds of this wait the process did not run: not counted against the deadline
    for (;;) {
        if (done()) break;
        const Clock::time_point now = Clock::now();
        const double gap = std::chrono::duration<double>(now - last).count();
        last = now;
        if (gap > kNotRunning) not_running += gap, resumed = now;
        const double waited = std::chrono::duration<double>(now - t0).count() - not_running;
        if (g_timeout > 0) {
            const double running = std::chrono::duration<double>(now - resumed).count();
            if (waited > g_timeout) expire(what(), waited, not_running, running, true, on_expiry);
            // another rank's deadline passed and it asks what this one waits for: answer (at most once a ms)
            if (now - asked > std::chrono::milliseconds(1)) {
                asked = now;
                if (word_pending()) expire(what(), waited, not_running, running, false, on_expiry);
            }
        }
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
