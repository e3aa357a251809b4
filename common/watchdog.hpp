// watchdog.hpp — a deadline on every blocking wait of Comm, so that a stuck rank (a dead NIC, a stalled GPU,
// a process stopped by a debugger) brings the job down with a report instead of leaving the others waiting
// forever.
//
// Both backends wait through wait_until(): the MPI backend polls its requests (MPI_Testall), the NCCL
// backend its stream (cudaStreamQuery, with ncclCommGetAsyncError for a failed peer). The first second of
// a wait spins as MPI_Waitall would; after that it sleeps 1 ms between polls, so a stalled job idles instead
// of burning a core per rank. When the wait passes --comm-timeout seconds:
//   1. the backend's on_expiry runs (NCCL: ncclCommAbort on every communicator, so the GPU lets go);
//   2. the rank tells every other rank what it waits for (a small message on MPI_COMM_WORLD, tag
//      kWatchdogTag) and listens for theirs for a grace period (a fifth of the timeout, 1 to 10 s). A rank
//      still waiting, whose deadline has not passed yet, answers too (its wait polls for such a message), so
//      the ranks that do not are the ones that did not arrive: stuck outside communication, or dead;
//   3. it sends the others a verdict (they stay quiet: the first report is the one to read), prints
//      "[rank R] watchdog: <op> on group <name> (K ranks: world ranks ...) waited S s ..." with the ranks
//      waiting too, "did not arrive: rank ..." and aborts the job (abort_job: MPI_Abort).
// Only a rank whose wait saw every other rank waiting, and none stopped, reports a deadlock. A process that did
// not run for a while (SIGSTOP, a debugger, a suspended machine: a gap of seconds between two polls) does not
// count that time as waiting; woken while the others report (mpirun wakes a stopped rank with SIGCONT to kill
// it), it is no witness: it tells them it was stopped, and they name it with the ranks that did not arrive.
// Without MPI (one rank) step 2 is skipped. No thread is started and nothing is added to a wait that
// completes: the clock is read once per poll.
//
// Playbook: "5D parallelism in a nutshell" (a job is as fast as its slowest rank); the test is
// tests/02_data_parallel/watchdog_test.sh (--inject-hang 2:3 --comm-timeout 5 on 4 ranks) and abort_test.sh
// (a rank stopped by SIGSTOP: the first diagnosis names it, no deadlock claimed).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace penta {

constexpr int kWatchdogTag = 32000;  // reserved on MPI_COMM_WORLD for the reports (MPI guarantees tags <= 32767)

// --comm-timeout: seconds a blocking wait may take before the job is aborted; <= 0: no deadline.
void set_comm_timeout(double seconds);
double comm_timeout();
constexpr double kDefaultCommTimeout = 300;  // generous: the first step also pays for set-up and first touch

// Seconds this rank has spent inside wait_until since it started: time it waited for other ranks. A step's
// time minus this is the rank's own work, what the straggler report compares (train_loop.cpp).
double comm_blocked_seconds();

// Polls done() until it returns true. what() describes the wait for the report (called only on expiry).
// On the deadline: on_expiry(), the report (see the file comment), abort_job. Never returns then.
void wait_until(const std::function<bool()>& done, const std::function<std::string()>& what,
                const std::function<void()>& on_expiry = {});

// "K ranks: world ranks 0 1 2 3" of a group whose members' world ranks are given in group order
std::string group_members_str(const std::vector<int>& world_ranks);

}  // namespace penta
