// ring_all_reduce.cpp — the ring all-reduce from send/recv. See ring_all_reduce.hpp.
//
// Playbook: "Data parallelism" and the appendix "A quick primer on collective operations" (Ring AllReduce).
// Run its tests: mpirun -np 4 build/bin/tests_02 -ts='ch02 np4' -tc='*ring*'
//
// K ranks sit on a ring: rank r sends only to r+1 and receives only from r-1 (mod K). The buffer of M
// elements is cut into K parts (part j = elements [part_start(M, K, j), part_start(M, K, j+1)), the first
// M % K parts one element longer), and every step moves ONE part per rank, all ranks at once.
//
// Phase 1, reduce-scatter (K-1 steps): at step s rank r sends part r-s-1 and receives part r-s-2, which it
// adds to its own copy. A part picks up one more rank's contribution per hop; after K-1 hops rank r holds
// part r summed over all K ranks. With K = 3 and x_r = (A_r, B_r, C_r):
//
//              part 0 (A)       part 1 (B)       part 2 (C)
//     step 0   r2: A2+A1        r0: B0+B2        r1: C1+C0        (r0 got B2 from r2, r1 got C0, r2 got A1)
//     step 1   r0: A0+A2+A1     r1: B1+B0+B2     r2: C2+C1+C0     each rank now owns its part, fully summed
//
// Phase 2, all-gather (K-1 steps): at step s rank r sends part r-s (the complete part it got last) and
// receives part r-s-1 straight into place. After K-1 hops every complete part has visited every rank.
//
// Traffic: each phase sends K-1 parts per rank, so 2(K-1)/K·M per rank in all, however large K is —
// that is why the ring is bandwidth-optimal, and why nccl-tests reports "bus bandwidth" as
// algbw·2(K-1)/K. Exactly: rank r sends every part but its own (r) in phase 1 and every part but r+1 (the
// one it receives last) in phase 2: 2M - n_r - n_(r+1) elements. The price is 2(K-1) latency steps.
//
// Deadlock: if every rank did a blocking send first, and the transport waited for the receiver (as MPI may
// for large messages), all K ranks would wait forever for one another. So each step STARTS the send
// (send_async), then receives, then waits for the send to finish.
#include "ring_all_reduce.hpp"

#include "../common/ops.hpp"

namespace penta {

namespace {

// a tag only this algorithm uses, so its messages never match another send/recv on the same Comm
constexpr int kRingTag = 2002;

}  // namespace

void ring_all_reduce(Comm& comm, Tensor& x) {
    CHECK(x.dtype == DType::f32, "ring_all_reduce sums f32 tensors, got %s", dtype_name(x.dtype));
    const int K = comm.size(), r = comm.rank();
    if (K == 1) return;  // one rank: the sum is x itself
    if (x.device() != Device::cpu && comm.backend() == CommBackend::mpi) {
        // send/recv of the MPI backend move host memory; run on a host copy, then copy the result back
        // (NCCL moves device memory: the ring below runs on the GPU as it is)
        Tensor host = x.clone(Device::cpu, Tag::comm);
        ring_all_reduce(comm, host);
        copy(x, host);
        return;
    }
    // EXERCISE 02.1 begin: the ring all-reduce: K-1 reduce-scatter steps, then K-1 all-gather steps, over send/recv
    const int64_t M = x.numel();
    Tensor flat = x.flat(0, M);  // (M,) the same memory as x
    const int next = (r + 1) % K, prev = (r + K - 1) % K;
    auto part = [&](int j) {  // part j (mod K) of the buffer, a view
        j = ((j % K) + K) % K;
        return flat.flat(part_start(M, K, j), part_count(M, K, j));
    };
    // phase 1 receives into a scratch buffer, because the local copy must still be added; part 0 is the
    // largest part, so one buffer of its size fits every part
    Tensor incoming = Tensor::empty({part_count(M, K, 0)}, DType::f32, x.device(), Tag::comm);  // (ceil(M/K),)

    // ---- phase 1: reduce-scatter. After it, part r is summed over all ranks (on rank r only). ----
    for (int s = 0; s < K - 1; s++) {
        Tensor outgoing = part(r - s - 1);  // (n_(r-s-1),) holds s+1 ranks' contributions
        Tensor mine = part(r - s - 2);      // (n_(r-s-2),) holds this rank's own contribution
        Tensor received = incoming.flat(0, mine.numel());
        CommHandle sending = comm.send_async(outgoing, next, kRingTag);
        comm.recv(received, prev, kRingTag);  // part r-s-2 with s+1 ranks' contributions
        add_inplace(mine, received);          // now s+2 ranks' contributions
        sending.wait();
    }

    // ---- phase 2: all-gather. Pass the complete parts on around the ring. ----
    for (int s = 0; s < K - 1; s++) {
        Tensor outgoing = part(r - s);  // complete: our own part (s = 0) or the one received last step
        Tensor arriving = part(r - s - 1);
        CommHandle sending = comm.send_async(outgoing, next, kRingTag);
        comm.recv(arriving, prev, kRingTag);  // complete part r-s-1 lands in place
        sending.wait();
    }
    // EXERCISE 02.1 end
}

}  // namespace penta
