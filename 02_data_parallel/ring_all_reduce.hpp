// ring_all_reduce.hpp — the ring all-reduce written out from send/recv, so it can be read step by step.
//
// Playbook: "Data parallelism" (the all-reduce that sums gradients over DP ranks) and the appendix "A quick
// primer on collective operations" (Ring AllReduce = a reduce-scatter then an all-gather, each of K-1
// steps around a ring). comm.all_reduce does the same job inside MPI/NCCL; this version exists to be read,
// and to check that the bytes it really sends are the 2(K-1)/K·M that Comm's counters claim.
//
//   mpirun -np 4 build/bin/tests_02 -ts='ch02 np4' -tc='*ring*'     (tests/02_data_parallel/test_comm.cpp)
//   mpirun -np 2 build/bin/bench_comm                              (its bandwidth beside MPI_Allreduce)
#pragma once
#include "../common/comm.hpp"

namespace penta {

// x (any shape, f32) := the element-wise sum of every rank's x, computed with comm.send_async/recv only.
// With the MPI backend, x on a GPU is staged through a host copy; with NCCL the ring runs on the GPU. Each rank sends 2M - n_r - n_(r+1) elements, where
// n_j = part_count(M, K, j): 2(K-1)/K·M when K divides M.
void ring_all_reduce(Comm& comm, Tensor& x);

}  // namespace penta
