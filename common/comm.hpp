// comm.hpp — Comm: the collectives every parallel chapter is built from, with their byte counters.
//
//   all_reduce       every rank ends with the element-wise sum (or max) of all ranks' x      (DP, TP's g)
//   reduce_scatter   rank r ends with the sum of all ranks' inputs over ITS part only        (ZeRO-2/3, SP)
//   all_gather       every rank ends with the concatenation of all ranks' parts             (ZeRO, SP)
//   broadcast        every rank ends with root's x
//   send / recv      point to point                                                           (PP, CP ring)
//   all_to_all(v)    rank r's chunk j goes to rank j's chunk r                                 (EP)
//   barrier
// Each exists synchronously and as *_async returning a CommHandle to wait() on, so a chapter can start a
// bucket's all-reduce while backward goes on (ch02) or prefetch the next layer (ch03).
//
// Parts: a buffer of M elements split over K ranks gives rank r the elements
// [part_start(M, K, r), part_start(M, K, r + 1)), the first M % K ranks one element more than the
// rest — so sizes that K does not divide work, and a part is a contiguous range of a flat buffer.
//
// Counters (ARCHITECTURE.md §6): calls and bytes per op, counted as the ring algorithm sends them, the way
// nccl-tests reports bus bandwidth: all-reduce 2(K-1)/K·M, reduce-scatter and all-gather (K-1)/K·M
// (M = the whole buffer's bytes), broadcast M, send M, all-to-all (K-1)/K·M (M = the bytes this rank
// hands in). bytes are a double because (K-1)/K·M need not be an integer.
//
// Backends: MPI (comm_mpi.cpp; host buffers, device tensors staged through host memory, so several ranks
// may share one GPU) and NCCL (comm_nccl.cu; device tensors, its own stream, events to overlap compute).
//
// Playbook: "Data parallelism" — the all-reduce, reduce-scatter and all-gather primitives; "A quick
// primer on collective operations" in the appendix. Test: `build/bin/tests_02 -ts='ch02 np*'` under mpirun.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace penta {

enum class ReduceOp { sum, max };
enum class CommOp { all_reduce, reduce_scatter, all_gather, broadcast, send, recv, all_to_all, barrier };
constexpr int kNumCommOps = 8;
const char* comm_op_name(CommOp op);

enum class CommBackend { mpi, nccl };
const char* comm_backend_name(CommBackend b);
// "auto" (nccl when the tensors live on a GPU and NCCL was built in, mpi otherwise) | "mpi" | "nccl"
CommBackend parse_comm_backend(const std::string& flag_value, Device device);

// first element of rank r's part of M elements over K ranks (r = K gives M)
inline int64_t part_start(int64_t M, int K, int r) {
    const int64_t base = M / K, extra = M % K;
    return r * base + (r < extra ? r : extra);
}
inline int64_t part_count(int64_t M, int K, int r) { return part_start(M, K, r + 1) - part_start(M, K, r); }

// The bytes a collective is counted as sending on a group of K (see the header comment).
double ring_bytes(CommOp op, int K, double buffer_bytes);

struct CommCounters {
    std::array<int64_t, kNumCommOps> calls{};
    std::array<double, kNumCommOps> bytes{};  // ring accounting, see the header comment
    int64_t scalar_reductions = 0;  // all_reduce_scalar calls (host-side doubles: not in calls or bytes)
    double total_bytes() const;
    int64_t total_calls() const;
    CommCounters operator-(const CommCounters& o) const;  // counts between two snapshots
};

// An operation in flight. wait() finishes it (and, for staged device tensors, copies the result back);
// waiting twice, or on a default-constructed handle, does nothing.
class CommHandle {
   public:
    struct Pending {
        virtual ~Pending() = default;
        virtual void wait() = 0;
        virtual bool test() = 0;  // true when complete; lets MPI make progress while compute runs
    };
    CommHandle() = default;
    explicit CommHandle(std::unique_ptr<Pending> p) : p_(std::move(p)) {}
    void wait() {
        if (p_) p_->wait();
        p_.reset();
    }
    bool test() {
        if (p_ && p_->test()) p_.reset();
        return !p_;
    }
    bool pending() const { return p_ != nullptr; }

   private:
    std::unique_ptr<Pending> p_;
};

class Comm {
   public:
    virtual ~Comm() = default;
    int rank() const { return rank_; }
    int size() const { return size_; }
    virtual CommBackend backend() const = 0;
    const std::string& name() const { return name_; }  // "world", "dp", "tp", ... for messages

    // ---- asynchronous forms: the tensors must stay alive and untouched until wait() -----------------
    // x in place
    virtual CommHandle all_reduce_async(Tensor& x, ReduceOp op = ReduceOp::sum) = 0;
    // in: the whole buffer (M elements); out: this rank's part (part_count(M, K, rank) elements)
    virtual CommHandle reduce_scatter_async(const Tensor& in, Tensor& out) = 0;
    // in: this rank's part of out (part_count(M, K, rank) elements); out: the whole buffer (M)
    virtual CommHandle all_gather_async(const Tensor& in, Tensor& out) = 0;
    virtual CommHandle broadcast_async(Tensor& x, int root) = 0;
    virtual CommHandle send_async(const Tensor& x, int peer, int tag = 0) = 0;
    virtual CommHandle recv_async(Tensor& x, int peer, int tag = 0) = 0;
    // in and out hold K equal chunks (numel divisible by K); chunk j of in goes to rank j (all_to_all_v
    // with equal counts)
    CommHandle all_to_all_async(const Tensor& in, Tensor& out);
    // counts/offsets in elements, K each: send_counts[j] elements from in at send_offsets[j] go to rank
    // j, which receives them at its recv_offsets[this rank]
    virtual CommHandle all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& send_counts,
                                          const std::vector<int64_t>& send_offsets, Tensor& out,
                                          const std::vector<int64_t>& recv_counts,
                                          const std::vector<int64_t>& recv_offsets) = 0;

    // ---- synchronous forms ----------------------------------------------------------------------------
    void all_reduce(Tensor& x, ReduceOp op = ReduceOp::sum) { all_reduce_async(x, op).wait(); }
    void reduce_scatter(const Tensor& in, Tensor& out) { reduce_scatter_async(in, out).wait(); }
    void all_gather(const Tensor& in, Tensor& out) { all_gather_async(in, out).wait(); }
    void broadcast(Tensor& x, int root) { broadcast_async(x, root).wait(); }
    void send(const Tensor& x, int peer, int tag = 0) { send_async(x, peer, tag).wait(); }
    void recv(Tensor& x, int peer, int tag = 0) { recv_async(x, peer, tag).wait(); }
    void all_to_all(const Tensor& in, Tensor& out) { all_to_all_async(in, out).wait(); }
    void all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts,
                      const std::vector<int64_t>& send_offsets, Tensor& out,
                      const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_offsets) {
        all_to_all_v_async(in, send_counts, send_offsets, out, recv_counts, recv_offsets).wait();
    }
    // ---- rooted collectives (the appendix's reduce, gather, scatter), built from send / recv ------------
    // No chapter's training needs them (DP and ZeRO use the all-* forms); they are here so that the seed's
    // table of primitives is complete and each is checked against its definition (tests/00_common/
    // test_comm_rooted.cpp). Counted as the sends they are made of: what leaves each rank.
    // reduce: in (M elements, f32) on every rank; on root, out (M) = the element-wise sum over the ranks,
    // added in rank order (so every run gives the same bits); out is not touched elsewhere
    void reduce(const Tensor& in, Tensor& out, int root);
    // gather: in = this rank's part (part_count(M, K, rank) elements); on root, out (M) = the parts in rank order
    void gather(const Tensor& in, Tensor& out, int root);
    // scatter: in (M) on root; out = this rank's part of it, elements [part_start(M, K, rank), ...+part_count)
    void scatter(const Tensor& in, Tensor& out, int root);
    virtual void barrier() = 0;
    // small host-side helper: sum / max of one double over the group. Counted apart (scalar_reductions),
    // so the byte counts stay the ring formulas' (the global grad norm's one all-reduce is one of these)
    double all_reduce_scalar(double x, ReduceOp op = ReduceOp::sum) {
        counters_.scalar_reductions++;
        return reduce_scalar(x, op);
    }
    // every rank's x, in rank order (K scalar reductions: for end-of-run tables, not for hot loops)
    std::vector<double> all_gather_scalar(double x);

    // A new Comm over the ranks that pass the same color, ordered by key (MPI_Comm_split's rule).
    // Collective over this Comm.
    virtual std::unique_ptr<Comm> split(int color, int key, const std::string& name) = 0;

    const CommCounters& counters() const { return counters_; }
    void reset_counters() { counters_ = {}; }

   protected:
    virtual double reduce_scalar(double x, ReduceOp op) = 0;  // the backend's all_reduce_scalar
    // all_to_all_v's argument checks (K counts and offsets, parts inside the tensors, same dtype); returns
    // the bytes that leave this rank, which is what all_to_all is counted as
    double check_all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts,
                              const std::vector<int64_t>& send_offsets, const Tensor& out,
                              const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_offsets) const;
    // reduce_scatter / all_gather: `part` has whole's dtype and is this rank's part_count of it
    void check_part(const Tensor& whole, const Tensor& part, const char* what) const;
    // a rank of this group, as a root or a peer
    void check_peer(int peer, const char* what) const;
    // one call of op that moved `bytes` from this rank
    void count(CommOp op, double bytes) {
        counters_.calls[(int)op] += 1;
        counters_.bytes[(int)op] += bytes;
    }
    // one call of op on a buffer of buffer_bytes, counted by ring_bytes
    void record(CommOp op, double buffer_bytes) { count(op, ring_bytes(op, size_, buffer_bytes)); }
    int rank_ = 0, size_ = 1;
    std::string name_ = "world";
    CommCounters counters_;
};

// The world communicator on this backend (MPI_COMM_WORLD, or an NCCL communicator over every rank with
// one GPU per process chosen by the node-local rank). Without MPI built in, a Comm of one rank.
std::unique_ptr<Comm> make_world_comm(CommBackend backend);
// a group of one rank, whatever the backend (what a build without MPI uses as its world)
std::unique_ptr<Comm> make_self_comm(const std::string& name);


}  // namespace penta
