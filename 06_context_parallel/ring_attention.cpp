// ring_attention.cpp — ring and all-gather attention over the context-parallel group (ring_attention.hpp).
// Read attend() for the ring: post the next block's transfer, attend to the block already here, wait,
// swap. attend_backward() is the same walk with dK/dV travelling beside K/V.
//   mpirun -np 4 build/bin/06_context_parallel --cp 4 --cp-attn ring --cp-shard zigzag
#include "ring_attention.hpp"

#include <cmath>

#include "../common/metrics.hpp"
#include "../common/ops.hpp"
#include "online_softmax.hpp"

namespace penta {

CpAttn parse_cp_attn(const std::string& v) {
    if (v == "ring") return CpAttn::ring;
    if (v == "allgather") return CpAttn::allgather;
    FAIL("--cp-attn '%s' must be ring (K/V blocks passed around the ring, overlapped with attention) or allgather "
         "(every rank's K/V gathered at once)", v.c_str());
}

const char* cp_attn_name(CpAttn a) { return a == CpAttn::ring ? "ring" : "allgather"; }

namespace {

constexpr int kTagKV = 61, kTagDKV = 62;

Tensor zeros_like(const Tensor& x, const Shape& s) { return Tensor::zeros(s, x.dtype, x.device(), Tag::workspace); }

// tokens [t0, t0 + len) of every sequence of x (B, T, n, hd) <-> a contiguous (B, len, n, hd)
void take_tokens(const Tensor& x, int64_t t0, Tensor& dst) {
    const int64_t B = x.size(0), T = x.size(1), row = x.size(2) * x.size(3), len = dst.size(1);
    for (int64_t b = 0; b < B; b++) {
        Tensor d = dst.flat(b * len * row, len * row);
        copy(d, x.flat((b * T + t0) * row, len * row));
    }
}
void put_tokens(Tensor& x, int64_t t0, const Tensor& src) {
    const int64_t B = x.size(0), T = x.size(1), row = x.size(2) * x.size(3), len = src.size(1);
    for (int64_t b = 0; b < B; b++) {
        Tensor d = x.flat((b * T + t0) * row, len * row);
        copy(d, src.flat(b * len * row, len * row));
    }
}
// the same along the last axis of lse (B, nh, T) <-> (B, nh, len)
void take_lse(const Tensor& lse, int64_t t0, Tensor& dst) {
    const int64_t rows = lse.size(0) * lse.size(1), T = lse.size(2), len = dst.size(2);
    for (int64_t i = 0; i < rows; i++) {
        Tensor d = dst.flat(i * len, len);
        copy(d, lse.flat(i * T + t0, len));
    }
}
void put_lse(Tensor& lse, int64_t t0, const Tensor& src) {
    const int64_t rows = lse.size(0) * lse.size(1), T = lse.size(2), len = src.size(2);
    for (int64_t i = 0; i < rows; i++) {
        Tensor d = lse.flat(i * T + t0, len);
        copy(d, src.flat(i * len, len));
    }
}
// x's tokens [t0, t0 + len) += part (B, len, n, hd)
void add_tokens(Tensor& x, int64_t t0, const Tensor& part) {
    Tensor cur = zeros_like(part, part.shape);
    take_tokens(x, t0, cur);
    add_inplace(cur, part);
    put_tokens(x, t0, cur);
}

}  // namespace

// The shapes of one call. A rank holds nseg chunks of c tokens of each of B sequences; its K/V travel as one
// packed buffer (nseg, 2, B, c, nkv, hd): chunk j's K then V, each S = B·c·nkv·hd elements, so a block's
// keys are a contiguous view and one send moves them all.
struct ContextParallelAttention::Geometry {
    int64_t B, Tl, nseg, c, nh, nkv, hd, S;
    Shape q_chunk() const { return {B, c, nh, hd}; }
    Shape kv_chunk() const { return {B, c, nkv, hd}; }
    int64_t kv_numel() const { return nseg * 2 * S; }
    // K (part 0) or V (part 1) of chunk j in a packed buffer
    Tensor part(const Tensor& buf, int64_t j, int p) const { return buf.flat((j * 2 + p) * S, S).view(kv_chunk()); }
    // this rank's k and v (B, Tl, nkv, hd), packed
    Tensor pack(const Tensor& k, const Tensor& v) const {
        Tensor kv = Tensor::empty({kv_numel()}, k.dtype, k.device(), Tag::workspace);
        for (int64_t j = 0; j < nseg; j++) {
            Tensor kj = part(kv, j, 0), vj = part(kv, j, 1);
            take_tokens(k, j * c, kj);
            take_tokens(v, j * c, vj);
        }
        return kv;
    }
};

// One of this rank's query chunks, contiguous, with its running (or final) output and log-sum-exp
struct ContextParallelAttention::QueryChunk {
    int chunk;       // its index in the sequence (position chunk·c)
    int64_t t0;      // its first token row on this rank
    Tensor q, out;   // (B, c, nh, hd)
    Tensor lse;      // (B, nh, c)
    Tensor dout, dq; // backward
};

ContextParallelAttention::ContextParallelAttention(Comm& cp, CpShard shard, CpAttn variant, int64_t seq)
    : cp_(cp), sharder_(cp.size(), cp.rank(), shard), variant_(variant), seq_(seq) {
    sharder_.check_seq(seq);
}

ContextParallelAttention::Geometry ContextParallelAttention::geometry(const Tensor& q, const Tensor& k) const {
    Geometry g;
    g.B = q.size(0), g.Tl = q.size(1), g.nh = q.size(2), g.hd = q.size(3), g.nkv = k.size(2);
    g.nseg = (int64_t)sharder_.chunks_of(0).size();
    g.c = seq_ / sharder_.chunks();
    CHECK(g.Tl == g.nseg * g.c,
          "context-parallel attention: this rank holds %ld tokens of each sequence, expected %ld (%ld chunk%s of "
          "%ld: --seq %ld over --cp %d, %s)", (long)g.Tl, (long)(g.nseg * g.c), (long)g.nseg, g.nseg > 1 ? "s" : "",
          (long)g.c, (long)seq_, cp_.size(), cp_shard_name(sharder_.shard()));
    g.S = g.B * g.c * g.nkv * g.hd;
    return g;
}

void ContextParallelAttention::finish_transfer(CommHandle& send, CommHandle& recv, double bytes) {
    stats_.transfer_bytes += bytes;
    const bool arrived = recv.test(), sent = send.test();  // test() both: each lets MPI progress
    if (arrived && sent) {
        stats_.hidden_bytes += bytes;
        return;
    }
    Timer t;
    recv.wait();
    send.wait();
    stats_.exposed_s += t.seconds();
}

void ContextParallelAttention::forward_blocks(const Geometry& g, std::vector<QueryChunk>& qs, const Tensor& kv, int src,
                                              int step, std::vector<CommHandle*> in_flight) {
    const std::vector<int> k_chunks = sharder_.chunks_of(src);
    Tensor part_out = Tensor::empty(g.q_chunk(), DType::f32, kv.device(), Tag::workspace);
    Tensor part_lse = Tensor::empty({g.B, g.nh, g.c}, DType::f32, kv.device(), Tag::workspace);
    for (QueryChunk& qc : qs)
        for (size_t j = 0; j < k_chunks.size(); j++) {
            const int kc = k_chunks[j];
            if (kc > qc.chunk) {  // every key of the block is after every query: nothing to compute
                stats_.skipped++;
                continue;
            }
            const AttnSpan span{qc.chunk * g.c, kc * g.c, true};  // global positions: the diagonal is causal
            attention_forward_tiled(qc.q, g.part(kv, (int64_t)j, 0), g.part(kv, (int64_t)j, 1), part_out, part_lse,
                                    span);
            online_softmax_merge(qc.out, qc.lse, part_out, part_lse);  // online_softmax.hpp
            stats_.blocks++;
            stats_.pairs += kc < qc.chunk ? g.c * g.c : g.c * (g.c + 1) / 2;
            if (record_) recorded_.push_back({step, src, qc.chunk, kc, kc == qc.chunk});
            for (CommHandle* h : in_flight) h->test();  // MPI moves the next block while we compute
        }
}

void ContextParallelAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                                      Tensor& out, Tensor& lse, Tensor* probs) {
    if (whole(q)) {  // every rank holds whole sequences (evaluation): nothing to exchange
        attention_forward_tiled(q, k, v, out, lse);
        return;
    }
    const Geometry g = geometry(q, k);
    const int P = cp_.size(), r = cp_.rank();
    stats_.forward_calls++;
    // this rank's query chunks, contiguous; the outputs start at "no key seen" (lse -inf)
    std::vector<QueryChunk> qs;
    const std::vector<int> mine = sharder_.chunks_of(r);
    for (int64_t i = 0; i < g.nseg; i++) {
        QueryChunk qc{mine[i], i * g.c, zeros_like(q, g.q_chunk()), zeros_like(q, g.q_chunk()),
                      Tensor::empty({g.B, g.nh, g.c}, DType::f32, q.device(), Tag::workspace), {}, {}};
        take_tokens(q, qc.t0, qc.q);
        fill(qc.lse, -INFINITY);
        qs.push_back(std::move(qc));
    }
    Tensor kv = g.pack(k, v);
    const double kv_bytes = (double)kv.nbytes();
    if (variant_ == CpAttn::ring) {
        Tensor next = Tensor::empty(kv.shape, kv.dtype, kv.device(), Tag::workspace);
        stats_.peak_kv_bytes = std::max<int64_t>(stats_.peak_kv_bytes, 2 * (int64_t)kv_bytes);
        for (int s = 0; s < P; s++) {
            const int src = (r - s + P) % P;  // whose K/V is here at step s
            CommHandle send, recv;
            if (s + 1 < P) {  // post the next block's transfer first, then compute on this one
                recv = cp_.recv_async(next, (r - 1 + P) % P, kTagKV);
                send = cp_.send_async(kv, (r + 1) % P, kTagKV);
            }
            forward_blocks(g, qs, kv, src, s, {&recv, &send});
            if (s + 1 < P) {
                finish_transfer(send, recv, kv_bytes);
                std::swap(kv, next);
            }
        }
    } else {
        Tensor all = Tensor::empty({P * g.kv_numel()}, kv.dtype, kv.device(), Tag::workspace);  // (P, nseg, 2, ...)
        stats_.peak_kv_bytes = std::max<int64_t>(stats_.peak_kv_bytes, (int64_t)(all.nbytes() + kv_bytes));
        Timer t;
        cp_.all_gather(kv, all);
        stats_.exposed_s += t.seconds();  // nothing to overlap it with: every block waits for it
        for (int src = 0; src < P; src++) forward_blocks(g, qs, all.flat(src * g.kv_numel(), g.kv_numel()), src, src, {});
    }
    record_ = false;
    for (QueryChunk& qc : qs) {
        put_tokens(out, qc.t0, qc.out);
        put_lse(lse, qc.t0, qc.lse);
    }
}

void ContextParallelAttention::backward_blocks(const Geometry& g, std::vector<QueryChunk>& qs, const Tensor& kv,
                                               Tensor& dkv, int src) {
    const std::vector<int> k_chunks = sharder_.chunks_of(src);
    for (QueryChunk& qc : qs)
        for (size_t j = 0; j < k_chunks.size(); j++) {
            const int kc = k_chunks[j];
            if (kc > qc.chunk) continue;
            const AttnSpan span{qc.chunk * g.c, kc * g.c, true};
            Tensor dk = g.part(dkv, (int64_t)j, 0), dv = g.part(dkv, (int64_t)j, 1);
            // with the FINAL out and lse, this block's share of every gradient, accumulated
            attention_backward_tiled(qc.dout, qc.q, g.part(kv, (int64_t)j, 0), g.part(kv, (int64_t)j, 1), qc.out, qc.lse,
                                     qc.dq, dk, dv, span);
        }
}

void ContextParallelAttention::attend_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                               const Tensor& positions, const Tensor& out, const Tensor& lse,
                                               const Tensor* probs, Tensor& dq, Tensor& dk, Tensor& dv) {
    if (whole(q)) {
        attention_backward_tiled(dout, q, k, v, out, lse, dq, dk, dv);
        return;
    }
    const Geometry g = geometry(q, k);
    const int P = cp_.size(), r = cp_.rank();
    std::vector<QueryChunk> qs;
    const std::vector<int> mine = sharder_.chunks_of(r);
    for (int64_t i = 0; i < g.nseg; i++) {
        QueryChunk qc{mine[i], i * g.c, zeros_like(q, g.q_chunk()), zeros_like(q, g.q_chunk()),
                      zeros_like(q, {g.B, g.nh, g.c}), zeros_like(q, g.q_chunk()), zeros_like(q, g.q_chunk())};
        take_tokens(q, qc.t0, qc.q);
        take_tokens(out, qc.t0, qc.out);
        take_lse(lse, qc.t0, qc.lse);
        take_tokens(dout, qc.t0, qc.dout);
        qs.push_back(std::move(qc));
    }
    Tensor kv = g.pack(k, v);
    Tensor dkv = zeros_like(kv, kv.shape);  // dK/dV of the block here, accumulated by every rank it visits
    const double kv_bytes = (double)kv.nbytes();
    if (variant_ == CpAttn::ring) {
        Tensor next = Tensor::empty(kv.shape, kv.dtype, kv.device(), Tag::workspace);
        Tensor dnext = Tensor::empty(kv.shape, kv.dtype, kv.device(), Tag::workspace);
        stats_.peak_kv_bytes = std::max<int64_t>(stats_.peak_kv_bytes, 4 * (int64_t)kv_bytes);
        const int prev = (r - 1 + P) % P, nxt = (r + 1) % P;
        for (int s = 0; s < P; s++) {
            const int src = (r - s + P) % P;
            CommHandle send, recv;
            if (s + 1 < P) {  // the next K/V block travels while this one's gradients are computed
                recv = cp_.recv_async(next, prev, kTagKV);
                send = cp_.send_async(kv, nxt, kTagKV);
            }
            backward_blocks(g, qs, kv, dkv, src);
            // this block's dK/dV (every rank before us on its way added theirs) goes on to the next rank; after
            // the last step that is its owner, and what arrives here is our own block's, complete
            CommHandle dsend = cp_.send_async(dkv, nxt, kTagDKV), drecv = cp_.recv_async(dnext, prev, kTagDKV);
            if (s + 1 < P) finish_transfer(send, recv, kv_bytes);
            Timer t;  // dK/dV can only leave once computed: this wait is never hidden
            drecv.wait();
            dsend.wait();
            stats_.exposed_s += t.seconds();
            std::swap(dkv, dnext);
            if (s + 1 < P) std::swap(kv, next);
        }
    } else {
        Tensor all = Tensor::empty({P * g.kv_numel()}, kv.dtype, kv.device(), Tag::workspace);
        Tensor dall = Tensor::zeros({P * g.kv_numel()}, kv.dtype, kv.device(), Tag::workspace);
        stats_.peak_kv_bytes = std::max<int64_t>(stats_.peak_kv_bytes, (int64_t)(2 * all.nbytes() + 2 * kv_bytes));
        Timer t;
        cp_.all_gather(kv, all);  // gathered again rather than kept from forward: memory over bytes
        stats_.exposed_s += t.seconds();
        for (int src = 0; src < P; src++) {
            Tensor d = dall.flat(src * g.kv_numel(), g.kv_numel());
            backward_blocks(g, qs, all.flat(src * g.kv_numel(), g.kv_numel()), d, src);
        }
        t.lap();
        cp_.reduce_scatter(dall, dkv);  // every rank's share of dK/dV of our keys, summed
        stats_.exposed_s += t.seconds();
    }
    for (QueryChunk& qc : qs) add_tokens(dq, qc.t0, qc.dq);
    for (int64_t j = 0; j < g.nseg; j++) {
        add_tokens(dk, j * g.c, g.part(dkv, j, 0));
        add_tokens(dv, j * g.c, g.part(dkv, j, 1));
    }
}

}  // namespace penta
