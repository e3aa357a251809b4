// vocab_parallel.cpp — the vocab-parallel cross-entropy and the gather of vocab shards (vocab_parallel.hpp).
//
// The per-row arithmetic runs on the host (a device tensor is staged through host memory, like the MPI
// backend does); the three (N) statistics travel as tensors on the logits' device, so NCCL works too.
// Test: `mpirun -np 2 build/bin/tests_04 -ts='ch04 np2' -tc='*vocab*'`.
#include "vocab_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "../common/ops.hpp"

namespace penta {

namespace {

// all-reduce a host vector over the group as a tensor on `device`
void all_reduce_host(Comm& comm, std::vector<float>& x, ReduceOp op, Device device) {
    Tensor t = Tensor::from_host(x, {(int64_t)x.size()}, device, Tag::workspace);
    comm.all_reduce(t, op);
    x = t.to_host();
}

}  // namespace

VocabParallelCrossEntropy::VocabParallelCrossEntropy(Comm& tp, const ParamLayout& layout, int64_t vocab)
    : tp_(tp), vocab_(vocab), start_(layout.vocab_start), rows_(layout.vocab_rows) {
    CHECK(layout.tp == tp.size() && layout.tp_rank == tp.rank(),
          "vocab-parallel cross-entropy: the layout is tp rank %d of %d, the group rank %d of %d", layout.tp_rank,
          layout.tp, tp.rank(), tp.size());
    real_ = std::clamp<int64_t>(vocab - start_, 0, rows_);
}

double VocabParallelCrossEntropy::forward_backward(const Tensor& logits, const Tensor& targets, Tensor& dlogits,
                                                   float grad_scale) {
    const int64_t N = logits.size(0), Vl = logits.size(1);
    CHECK(Vl == rows_, "vocab-parallel cross-entropy: logits have %lld columns, this rank holds %lld vocab rows",
          (long long)Vl, (long long)rows_);
    // EXERCISE 04.2 begin: vocab-parallel cross-entropy: the row max, the sum of exponentials and the target logit over the shards, then loss and gradient
    const Device dev = logits.device();
    Tensor z_host = dev == Device::cpu ? logits : logits.clone(Device::cpu, Tag::workspace);  // (N, Vl)
    const float* z = z_host.ptr<float>();
    const std::vector<int32_t> tg = targets.to_host_i32();  // (N) global ids
    const float ninf = -std::numeric_limits<float>::infinity();

    // 1. m: the row max over the real columns of every shard (padding columns never count)
    std::vector<float> m(N, ninf);
    for (int64_t n = 0; n < N; n++)
        for (int64_t v = 0; v < real_; v++) m[n] = std::max(m[n], z[n * Vl + v]);
    all_reduce_host(tp_, m, ReduceOp::max, dev);

    // the gradient rows on the host; they first hold exp(z - m), which step 3 scales into the softmax, so each
    // exponential is computed once. dlogits may alias logits (the model passes the same tensor).
    Tensor dz_host;
    float* dz = nullptr;
    if (dlogits.defined()) {
        dz_host = dev == Device::cpu ? dlogits : Tensor::empty(logits.shape, logits.dtype, Device::cpu, Tag::workspace);
        dz = dz_host.ptr<float>();
    }
    std::vector<float> scratch(dz ? 0 : Vl);  // the exp row when no gradient is wanted (evaluation)

    // 2. S and z_y in one all-reduce of (2, N): [0, N) sum of exp, [N, 2N) the target's logit
    std::vector<float> stats(2 * N, 0.0f);
    for (int64_t n = 0; n < N; n++) {
        const int32_t t = tg[n];
        if (t == -1) continue;
        CHECK(t >= 0 && t < vocab_, "vocab-parallel cross-entropy: target %d of row %lld is outside [0, %lld)", t,
              (long long)n, (long long)vocab_);
        if (t >= start_ && t < start_ + real_) stats[N + n] = z[n * Vl + (t - start_)];  // the owner's part
        float* e = dz ? dz + n * Vl : scratch.data();  // written after z_y is read: it may be z's own row
        double s = 0;
        for (int64_t v = 0; v < real_; v++) {
            e[v] = std::exp(z[n * Vl + v] - m[n]);
            s += e[v];
        }
        stats[n] = (float)s;
    }
    all_reduce_host(tp_, stats, ReduceOp::sum, dev);

    // 3. loss and, on this shard, (softmax - onehot) * grad_scale; padding columns and ignored rows get 0
    double total = 0;
    for (int64_t n = 0; n < N; n++) {
        const int32_t t = tg[n];
        float* dr = dz ? dz + n * Vl : nullptr;
        if (t == -1) {
            if (dr) std::fill(dr, dr + Vl, 0.0f);
            continue;
        }
        const double S = stats[n];
        total += std::log(S) + m[n] - stats[N + n];
        if (!dr) continue;
        const float k = (float)(grad_scale / S);
        for (int64_t v = 0; v < real_; v++) dr[v] *= k;  // exp(z - m) from step 2
        std::fill(dr + real_, dr + Vl, 0.0f);
        if (t >= start_ && t < start_ + real_) dr[t - start_] -= grad_scale;
    }
    if (dz && dev != Device::cpu) copy(dlogits, dz_host);
    return total;
    // EXERCISE 04.2 end
}

Tensor gather_vocab_logits(Comm& tp, const Tensor& local, int64_t vocab) {
    const int64_t N = local.size(0), Vl = local.size(1), t = tp.size();
    Tensor all = Tensor::empty({t, N, Vl}, local.dtype, local.device(), Tag::workspace);  // rank r's shard at r
    tp.all_gather(local, all);
    const std::vector<float> a = all.to_host();
    std::vector<float> full(N * vocab);  // (N, vocab): vocab id r·Vl + v comes from rank r's column v
    for (int64_t r = 0; r < t; r++)
        for (int64_t n = 0; n < N; n++)
            for (int64_t v = 0; v < Vl && r * Vl + v < vocab; v++) full[n * vocab + r * Vl + v] = a[(r * N + n) * Vl + v];
    return Tensor::from_host(full, {N, vocab}, local.device(), Tag::workspace);
}

}  // namespace penta
