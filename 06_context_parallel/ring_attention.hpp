// ring_attention.hpp — context parallelism's attention kernel: every cp rank holds some chunks of every
// sequence (context_sharding.hpp); its queries must still see the keys and values of all earlier tokens,
// which live on the other ranks. Two ways to bring them (the playbook's "AllGather vs All-to-All"):
//
//   ring       (--cp-attn ring)       cp steps. At step s rank r attends its queries to the K/V block of
//              rank r-s while it sends the block it has to rank r+1 and receives the next from rank r-1
//              (asynchronous send/recv, overlapping the attention of the block already here). Each step's
//              partial result is merged into the running one by log-sum-exp (online_softmax.hpp), the
//              online softmax of flash attention applied across ranks. Blocks wholly in the future of every
//              query are skipped, not masked. Backward: the K/V blocks go round again, and each block's
//              dK/dV travels with it, one more hop at the end bringing every rank its own.
//                  bytes sent per layer and micro-batch: forward (cp-1)·M, backward (2cp-1)·M,
//                  M = 2·b·(s/cp)·n_kv·d·4 (this rank's K and V, f32)
//              K/V memory: two blocks (the one here, the one arriving).
//   allgather  (--cp-attn allgather)  one all-gather of every rank's K/V, attend, and (backward) one
//              reduce-scatter of dK/dV: forward (cp-1)·M, backward 2(cp-1)·M; no ring latency, but all cp
//              blocks in memory at once.
//
// Backward needs nothing but the final (merged) output and log-sum-exp: with them each block's share of
// dQ, dK, dV is exact (ops.hpp: "attention backward accumulates ... context parallelism").
// A micro-batch that holds whole sequences (evaluation: positions 0..T-1 on every rank) attends locally.
//
// Playbook: "Context parallelism" (Ring Attention, Zig-Zag, AllGather vs All-to-All), "Flash attention".
// Test: `make test CH=06` (tests/06_context_parallel/test_ring_attention.cpp).
#pragma once
#include <string>
#include <vector>

#include "../common/comm.hpp"
#include "../common/spine.hpp"
#include "context_sharding.hpp"

namespace penta {

enum class CpAttn { ring, allgather };
CpAttn parse_cp_attn(const std::string& flag_value);  // ring | allgather; the error names --cp-attn
const char* cp_attn_name(CpAttn a);

// What the kernel did on this rank since the last reset (forward and backward, every layer)
struct CpAttentionStats {
    int64_t forward_calls = 0;         // attend() calls on sharded micro-batches
    int64_t blocks = 0, skipped = 0;   // forward (query chunk, key chunk) blocks computed / skipped (future)
    int64_t pairs = 0;                 // visible (query, key) pairs in the computed forward blocks
    double exposed_s = 0;              // blocked waiting for K/V (or dK/dV) to arrive, forward and backward
    double transfer_bytes = 0;         // ring: bytes of the overlapped K/V transfers (forward and backward)
    double hidden_bytes = 0;           // of which complete when the block's attention finished: fully hidden
    int64_t peak_kv_bytes = 0;         // largest K/V (+ dK/dV) buffer set one call held at once
    double hidden_fraction() const { return transfer_bytes > 0 ? hidden_bytes / transfer_bytes : 0.0; }
};

class ContextParallelAttention : public AttentionCore {
   public:
    // cp: the context-parallel group (rank order = sharder's ranks); seq: the training sequence length,
    // whose sharded micro-batches hold seq/cp tokens per sequence
    ContextParallelAttention(Comm& cp, CpShard shard, CpAttn variant, int64_t seq);
    bool materialises_probs() const override { return false; }
    void attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions, Tensor& out, Tensor& lse,
                Tensor* probs) override;
    void attend_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                         const Tensor& out, const Tensor& lse, const Tensor* probs, Tensor& dq, Tensor& dk,
                         Tensor& dv) override;

    const ContextSharder& sharder() const { return sharder_; }
    CpAttn variant() const { return variant_; }
    const CpAttentionStats& stats() const { return stats_; }
    void reset_stats() { stats_ = {}; }

    // One computed forward block: at ring step `step` (allgather: the source rank's turn) this rank attended
    // its query chunk to key chunk k_chunk, which rank src holds; diagonal: the causal mask cuts it.
    struct Cell {
        int step, src, q_chunk, k_chunk;
        bool diagonal;
    };
    // record the blocks of the next sharded forward call (one layer of one micro-batch)
    void record_next() { record_ = true, recorded_.clear(); }
    const std::vector<Cell>& recorded() const { return recorded_; }

   private:
    struct Geometry;
    struct QueryChunk;
    Geometry geometry(const Tensor& q, const Tensor& k) const;
    bool whole(const Tensor& q) const { return q.size(1) == seq_; }
    // forward blocks of this rank's query chunks against the K/V of rank src (kv: its packed buffer)
    void forward_blocks(const Geometry& g, std::vector<QueryChunk>& qs, const Tensor& kv, int src, int step,
                        std::vector<CommHandle*> in_flight);
    void backward_blocks(const Geometry& g, std::vector<QueryChunk>& qs, const Tensor& kv, Tensor& dkv, int src);
    // waits for a ring transfer; counts it hidden when already complete, else times the wait
    void finish_transfer(CommHandle& send, CommHandle& recv, double bytes);

    Comm& cp_;
    ContextSharder sharder_;
    CpAttn variant_;
    int64_t seq_;
    CpAttentionStats stats_;
    bool record_ = false;
    std::vector<Cell> recorded_;
};

}  // namespace penta
