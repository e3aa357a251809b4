// runtime.cpp — see runtime.hpp. The only place that calls MPI_Init / MPI_Abort.
#include "runtime.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

#include "core.hpp"

#if defined(PENTA_CUDA)
namespace penta::cuda {
void select_device(int local_rank);  // cuda/memory.cu
}
#endif

namespace penta {

namespace {
int g_rank = 0, g_size = 1, g_local = 0, g_local_size = 1;
bool g_mpi = false;
}  // namespace

void runtime_init(int* argc, char*** argv) {
#if defined(PENTA_MPI)
    int inited = 0;
    MPI_Initialized(&inited);
#if defined(OPEN_MPI)
    // Open MPI's non-blocking all-reduce (libnbc, what Comm::all_reduce_async uses) picks a tree algorithm
    // by default that runs ~3x slower than the blocking one on large buffers (bench_comm, 64 MiB on 2
    // ranks); its ring algorithm matches the blocking call. Only a default: a user's setting wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
#endif
    if (!inited) MPI_CHECK(MPI_Init(argc, argv));
    g_mpi = true;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_size));
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &g_local));
    MPI_CHECK(MPI_Comm_size(node, &g_local_size));
    MPI_Comm_free(&node);
#endif
#if defined(PENTA_CUDA)
    cuda::select_device(g_local);
#endif
#if !defined(PENTA_MPI)
    (void)argc;
    (void)argv;
#endif
}

void runtime_finalize() {
#if defined(PENTA_MPI)
    int fin = 0;
    MPI_Finalized(&fin);
    if (g_mpi && !fin) MPI_Finalize();
#endif
}

int world_rank() { return g_rank; }
int world_size() { return g_size; }
int local_rank() { return g_local; }
int local_size() { return g_local_size; }
bool mpi_enabled() { return g_mpi; }

void abort_job(int code) {
    std::fflush(stdout);
    std::fflush(stderr);
#if defined(PENTA_MPI)
    if (g_mpi && g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    std::_Exit(code);
}

int run_main(int argc, char** argv, const std::function<int(int, char**)>& body) {
    runtime_init(&argc, &argv);
    int rc = 0;
    try {
        rc = body(argc, argv);
    } catch (const Error& e) {
        // the message already starts with "[rank R] file:line:"
        std::fprintf(stderr, "error: %s\n", e.what());
        abort_job(1);
    } catch (const std::bad_alloc& e) {
        // an allocation outside the tagged allocator (which names its tag, size and flags itself)
        std::fprintf(stderr, "error: [rank %d] out of memory (%s) in an allocation outside the tensor allocator; "
                     "lower --micro-batch, --seq or the model's size\n", g_rank, e.what());
        abort_job(1);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: [rank %d] %s\n", g_rank, e.what());
        abort_job(1);
    }
    runtime_finalize();
    return rc;
}

}  // namespace penta
