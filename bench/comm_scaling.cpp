// bench/comm_scaling.cpp — two claims about collectives against the number of ranks K, on this machine's CPU
// ranks: (1) a reduce-scatter takes about half an all-reduce's time (it is the all-reduce's first half: (K-1)/K·M
// bytes a rank against 2(K-1)/K·M), and (2) the ring's latency term grows linearly with K (2(K-1) steps) while
// its bandwidth term does not. Run once per K by scripts/bench_02_comm.sh (K = 2..8); one row each. Prints
// figures, asserts nothing (timings are never asserted; the byte counts are: tests_02).
//
//   scripts/bench_02_comm.sh                     (part of `make bench`)
//   mpirun -np 4 build/bin/bench_comm_scaling [--reps 50] [--mib 1] [--header]
//
// Columns: "tiny ring" is chapter 02's ring all-reduce of K floats, where the time is the ring's 2(K-1) message
// latencies and nothing else; "per step" divides it by 2(K-1). AR and RS are an all-reduce and a reduce-scatter
// of --mib MiB of f32, best of --reps (after a warm-up), the slowest rank's time, RS/AR their ratio (the seed:
// 1/2): as Comm calls them (MPI_Iallreduce, MPI_Ireduce_scatter: chapters 02 and 03) and as blocking MPI calls
// (MPI_Allreduce, MPI_Reduce_scatter_block, which Open MPI serves with its tuned algorithms); "ring" is chapter
// 02's ring all-reduce of the same buffer.
// Playbook: "Data parallelism", "ZeRO" (reduce-scatter), appendix "A quick primer on collective operations".
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
    int64_t reps = 50, mib = 1;
    bool header = false;
    Flags flags("bench_comm_scaling", "reduce-scatter vs all-reduce time and ring latency, one row for this K");
    flags.chapter("Collective scaling (benchmark)");
    flags.add("reps", &reps, "timed repetitions per figure (the best is printed)");
    flags.add("mib", &mib, "the large buffer, MiB of f32");
    flags.add("header", &header, "print the column names first");
    if (!flags.parse(argc, argv)) return 0;
    CHECK(reps >= 1, "--reps %lld must be >= 1", (long long)reps);
    CHECK(mib >= 1, "--mib %lld must be >= 1", (long long)mib);

    auto comm = make_world_comm(CommBackend::mpi);
    const int K = comm->size();
    CHECK(K >= 2, "bench_comm_scaling needs at least 2 ranks (mpirun -np K), got %d", K);
    Tensor tiny = Tensor::empty({K}, DType::f32, Device::cpu, Tag::comm);  // (K,): one float a ring part
    const double t_tiny =
        best_seconds(*comm, reps * 5, [&] { ring_all_reduce(*comm, tiny); }, [&] { fill(tiny, 1.0f); });

    const int64_t M = (mib << 20) / 4 / K * K;  // elements, a multiple of K: equal parts
    Tensor x = Tensor::empty({M}, DType::f32, Device::cpu, Tag::comm);                     // (M,)
    Tensor part = Tensor::empty({M / K}, DType::f32, Device::cpu, Tag::comm);              // (M/K,)
    auto ones = [&] { fill(x, 1.0f); };  // each rep sums a buffer of ones
    const double t_ar = best_seconds(*comm, reps, [&] { comm->all_reduce(x); }, ones);
    const double t_rs = best_seconds(*comm, reps, [&] { comm->reduce_scatter(x, part); }, ones);
    const double t_ring = best_seconds(*comm, reps, [&] { ring_all_reduce(*comm, x); }, ones);
    // the blocking calls get Open MPI's tuned algorithms (ring and friends), the non-blocking ones libnbc's
    double b_ar = 0, b_rs = 0;
#if defined(PENTA_MPI)
    b_ar = best_seconds(*comm, reps, [&] {
        MPI_Allreduce(MPI_IN_PLACE, x.data(), (int)M, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }, ones);
    b_rs = best_seconds(*comm, reps, [&] {
        MPI_Reduce_scatter_block(x.data(), part.data(), (int)(M / K), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }, ones);
#endif
    if (comm->rank() == 0) {
        if (header)
            std::printf("%3s %13s %12s  %-7s | %-25s | %-25s | %8s\n", "K", "tiny ring us", "per step us", "buffer",
                        "comm (non-blocking) ms", "MPI blocking ms", "ring ms");
        if (header)
            std::printf("%3s %13s %12s  %-7s | %8s %8s %7s | %8s %8s %7s | %8s\n", "", "", "", "", "AR", "RS",
                        "RS/AR", "AR", "RS", "RS/AR", "AR");
        std::printf("%3d %13.1f %12.1f  %3lld MiB | %8.3f %8.3f %7.2f | %8.3f %8.3f %7.2f | %8.3f\n", K, t_tiny * 1e6,
                    t_tiny * 1e6 / (2.0 * (K - 1)), (long long)mib, t_ar * 1e3, t_rs * 1e3, t_rs / t_ar, b_ar * 1e3,
                    b_rs * 1e3, b_ar > 0 ? b_rs / b_ar : 0.0, t_ring * 1e3);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, bench); }
