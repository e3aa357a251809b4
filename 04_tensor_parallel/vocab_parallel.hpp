// vocab_parallel.hpp — the vocabulary split over the tensor-parallel ranks: the vocab-parallel
// cross-entropy (a LossCore that never holds the full logits) and the gather of the logits' vocab shards
// for evaluation.
//
// Playbook: "Tensor parallelism" — "Tensor Parallelism in a Transformer Block" (the embedding and the LM
// head are split along the vocabulary; Megatron-LM's vocab-parallel cross-entropy). Rank r holds rows
// [r·Vp/t, (r+1)·Vp/t) of the embedding and of lm_head (ParamLayout::vocab_start / vocab_rows), Vp the
// vocabulary padded up to a multiple of t; the padding rows are zero and are masked out here, so any
// vocabulary works. Each rank computes the logits of its own vocab shard, (N, Vp/t). The softmax over
// the full vocabulary needs only three numbers per token from the group:
//     m   = max over ranks of the local row max                     (all-reduce max)
//     S   = sum over ranks of sum_v exp(z_v - m)                    (all-reduce sum)
//     z_y = the target's logit, from the rank that owns it          (all-reduce sum; 0 elsewhere)
//     loss = log S + m - z_y,   d loss / d z_v = exp(z_v - m) / S - [v == y]   (on the local shard)
// so the traffic is 3N floats instead of the N·V of gathering the logits.
// On a GPU this runs correct but slow: the (N, Vp/t) logits are copied to the host for the three row
// statistics and the gradient is copied back (a CUDA kernel for them is the open follow-up).
// Test: `mpirun -np 2 build/bin/tests_04 -ts='ch04 np2' -tc='*vocab*'`.
#pragma once
#include "../common/comm.hpp"
#include "../common/model.hpp"

namespace penta {

// Vocab-parallel cross-entropy: the loss of VocabParallelEmbedding's logits (parallel_layers.hpp).
//   split:    rank r holds the logits' columns [r·Vp/t, (r+1)·Vp/t), this rank's vocab rows of lm_head.
//   forward:  all-reduce (max) of the row max m, one all-reduce (sum) of (2, N): S and z_y; loss on every rank.
//   backward: none: d z = (softmax - onehot) · grad_scale on the local shard, from m, S (no collective).
class VocabParallelCrossEntropy : public LossCore {
   public:
    // layout: this rank's ParamLayout (vocab_start, vocab_rows); vocab: the real (unpadded) vocabulary
    VocabParallelCrossEntropy(Comm& tp, const ParamLayout& layout, int64_t vocab);
    // logits (N, Vp/t): this rank's vocab shard; targets (N): GLOBAL ids, -1 ignored. Returns the sum of
    // the token losses (the same on every rank); dlogits (may alias logits) gets the local shard's gradient.
    double forward_backward(const Tensor& logits, const Tensor& targets, Tensor& dlogits,
                            float grad_scale) override;

   private:
    Comm& tp_;
    int64_t vocab_, start_, rows_;
    int64_t real_;  // columns of this shard that are real vocabulary entries (the rest is padding)
};

// Every rank's (N, Vp/t) logits -> the full (N, vocab) logits on every rank (padding dropped), on the
// device of `local`. For evaluation (argmax needs the whole row); training never calls it.
Tensor gather_vocab_logits(Comm& tp, const Tensor& local, int64_t vocab);

}  // namespace penta
