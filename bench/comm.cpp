// bench/comm.cpp — all-reduce bandwidth: chapter 02's ring built from send/recv (ring_all_reduce) beside
// the MPI library's own all-reduce, as Comm calls it (comm.all_reduce = MPI_Iallreduce + wait, the
// non-blocking form that lets DP overlap it with backward) and as a blocking MPI_Allreduce (the library's
// tuned algorithms, which a non-blocking call does not get in Open MPI). Prints figures, asserts nothing.
//
//   scripts/bench_02_comm.sh                                   (2 ranks; part of `make bench`)
//   mpirun -np 2 build/bin/bench_comm [--reps 5] [--max-mib 64]
//
// Playbook: "Data parallelism" (overlapping the gradient all-reduce needs it to be fast) and the appendix
// "A quick primer on collective operations". Figures follow nccl-tests (doc/PERFORMANCE.md there):
//   algbw = S / t            S the buffer's bytes, t the time of the slowest rank
//   busbw = algbw · 2(K-1)/K  the rate each rank's link really carried under the ring algorithm, which
//                             does not depend on K, so it compares with the link's peak bandwidth
// Each size is timed best of --reps (after one warm-up); each rep starts from a barrier. "sent/S" is the
// ring's own send counter divided by S: 2(K-1)/K when K divides the element count.
#include <cstdio>

#include "../02_data_parallel/ring_all_reduce.hpp"
#include "comm_timing.hpp"
#include "../common/config.hpp"
#include "../common/ops.hpp"
#include "../common/runtime.hpp"
#if defined(PENTA_MPI)
#include <mpi.h>
#endif

using namespace penta;

namespace {

int bench(int argc, char** argv) {
    int64_t reps = 5, max_mib = 64;
    Flags flags("bench_comm", "all-reduce bandwidth: ring from send/recv vs MPI's all-reduce");
    flags.chapter("All-reduce bandwidth (benchmark)");
    flags.add("reps", &reps, "timed repetitions per size (the best is printed)");
    flags.add("max-mib", &max_mib, "largest buffer in MiB (sizes grow 16x from 64 KiB up to it)");
    if (!flags.parse(argc, argv)) return 0;
    CHECK(reps >= 1, "--reps %lld must be >= 1", (long long)reps);
    CHECK(max_mib >= 1, "--max-mib %lld must be >= 1", (long long)max_mib);

    auto comm = make_world_comm(CommBackend::mpi);
    const int K = comm->size();
    const double bus = K > 1 ? 2.0 * (K - 1) / K : 0.0;
    if (comm->rank() == 0) {
        std::printf("all-reduce of f32 on %d rank(s), best of %lld; GB/s = 1e9 bytes/s; busbw = algbw * 2(K-1)/K\n",
                    K, (long long)reps);
        std::printf("%8s  %-34s %9s %11s %11s %7s\n", "size", "algorithm", "time ms", "algbw GB/s", "busbw GB/s",
                    "sent/S");
    }
    std::vector<int64_t> sizes;  // bytes
    for (int64_t s = 64 << 10; s < max_mib << 20; s *= 16) sizes.push_back(s);
    sizes.push_back(max_mib << 20);
    for (int64_t S : sizes) {
        Tensor x = Tensor::empty({S / 4}, DType::f32, Device::cpu, Tag::comm);  // (S/4,)
        char label[32];
        std::snprintf(label, sizeof label, S >= (1 << 20) ? "%lld MiB" : "%lld KiB",
                      (long long)(S >= (1 << 20) ? S >> 20 : S >> 10));
        auto row = [&](const char* algorithm, double t, const char* sent) {
            if (comm->rank() == 0)
                std::printf("%8s  %-34s %9.3f %11.3f %11.3f %7s\n", label, algorithm, t * 1e3, S / t * 1e-9,
                            S / t * bus * 1e-9, sent);
        };
        auto ones = [&] { fill(x, 1.0f); };  // each rep sums a buffer of ones
        comm->reset_counters();
        const double ring = best_seconds(*comm, reps, [&] { ring_all_reduce(*comm, x); }, ones);
        const std::string sent = strfmt("%.3f", comm->counters().bytes[(int)CommOp::send] / double(reps + 1) / S);
        row("ring from send/recv (ch02)", ring, sent.c_str());
        row("comm.all_reduce (MPI_Iallreduce)", best_seconds(*comm, reps, [&] { comm->all_reduce(x); }, ones), "-");
#if defined(PENTA_MPI)
        row("MPI_Allreduce (blocking)", best_seconds(*comm, reps, [&] {
                MPI_Allreduce(MPI_IN_PLACE, x.data(), (int)x.numel(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            }, ones), "-");
#endif
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, bench); }
