// runtime.hpp — process start-up and shutdown for every pentatron program and the test binary.
//
// One process per rank, started by mpirun (or srun). runtime_init() starts MPI when built with it
// (MPI=1, the default) and otherwise runs as a single rank. run_main() wraps a program's body: an
// uncaught error on ANY rank prints "[rank R] ..." and aborts the whole job (MPI_Abort), so a failed rank
// never leaves the others hanging in a collective.
//
//   int main(int argc, char** argv) { return penta::run_main(argc, argv, train); }
#pragma once
#include <functional>

namespace penta {

void runtime_init(int* argc, char*** argv);
void runtime_finalize();
int world_rank();
int world_size();
int local_rank();  // rank among the processes on this node (chooses the GPU)
int local_size();  // processes on this node (they share its memory)
bool mpi_enabled();
[[noreturn]] void abort_job(int code);  // MPI_Abort(MPI_COMM_WORLD) or exit()

// Runs body(argc, argv) between runtime_init and runtime_finalize; errors abort the job (see above).
int run_main(int argc, char** argv, const std::function<int(int, char**)>& body);

}  // namespace penta
