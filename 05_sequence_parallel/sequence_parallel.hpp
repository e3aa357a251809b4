// sequence_parallel.hpp — sequence parallelism: the regions tensor parallelism leaves replicated (the
// RMSNorms, the residual adds, the embedding output and the head's norm) run on 1/t of the tokens.
//
// Playbook: "Sequence parallelism". TP (chapter 04) keeps the activations between its regions whole on
// every rank: the norm input, the residual stream. SP splits them along the tokens instead, and swaps f
// and g for a pair that moves between the two layouts:
//                  forward                                      backward
//   f (enter)      all-gather along the sequence (N/t -> N)     reduce-scatter (N -> N/t)   (SequenceParallel::f)
//   g (exit)       reduce-scatter along the sequence (N -> N/t) all-gather (N/t -> N)       (SequenceParallel::g)
// A reduce-scatter plus an all-gather moves exactly what one all-reduce moves ((t-1)/t·M each, 2(t-1)/t·M
// for the all-reduce), so SP costs no extra traffic: still 8(t-1)/t · s b h elements per layer.
// The split: the model flattens (B, T) into N = B·T token rows, row n = b·T + i; rank r holds the
// contiguous rows [r·N/t, (r+1)·N/t). An all-gather puts them back in order, so attention (which needs
// whole sequences) sees (B, T) unchanged. N must be divisible by t (checked, naming the flags).
// What changes besides the boundary: the replicated norm weights now see only this rank's tokens, so
// their gradients are partial sums that must be summed over tp. The layout records it (a model built with
// ModelOptions::sequence_parallel gives the norms grad_summed_on tp), and the model asks this boundary to
// sum each norm's gradient right where it is computed (sum_token_split_grad): nothing to add to the step,
// so SP composes with DP, ZeRO-1/2/3 and any schedule untouched.
//   mpirun -np 2 build/bin/05_sequence_parallel --tp 2 --sp
// Test: `make test CH=05`.
#pragma once
#include <memory>

#include "../04_tensor_parallel/tp_install.hpp"

namespace penta {

// f and g in their sequence-parallel forms (the playbook's figure calls them g and g*): the same tensor-parallel
// layout and byte tallies as TensorParallel; only the collectives differ.
class SequenceParallel : public TensorParallel {
   public:
    explicit SequenceParallel(Comm& tp) : TensorParallel(tp) {}
    // f under SP: enters a column-parallel region from the sequence-split stream
    Tensor f(const Tensor& x) override;            // forward:  all-gather      (N/t, h) -> (N, h)
    Tensor f_backward(const Tensor& dx) override;  // backward: reduce-scatter  (N, h)   -> (N/t, h)
    // g under SP: leaves a row-parallel region into the sequence-split stream
    Tensor g(const Tensor& y) override;            // forward:  reduce-scatter  (N, h)   -> (N/t, h)
    Tensor g_backward(const Tensor& dy) override;  // backward: all-gather      (N/t, h) -> (N, h)
    // the tokens between boundaries are split: a norm weight's gradient is all-reduced over tp
    bool splits_tokens() const override { return true; }
    void sum_token_split_grad(Tensor& partial) override;
    // bytes those norm-gradient all-reduces sent (not activations: outside forward / backward bytes)
    double norm_grad_bytes() const { return norm_grad_bytes_; }

   private:
    double norm_grad_bytes_ = 0;
};

// Chapter 04's install_tensor_parallel (tp_install.hpp) with SP's boundary when sp, f / g otherwise; nothing
// when the group has one rank. The model must be built with tensor_parallel_options(..., sp).
TensorParallelSeams install_tensor_parallel(Model& model, Comm& tp, bool sp);

// Bytes the norm / residual regions of every layer keep for backward (LayerActs x_in, attn_rstd, x_mid,
// mlp_rstd), as the allocator holds them: with SP exactly 1/t of the same without.
int64_t norm_region_activation_bytes(const MicroBatchActs& acts);

}  // namespace penta
