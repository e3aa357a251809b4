// online_softmax.hpp — the online softmax across key blocks: merge two attention partials of the same
// queries over DISJOINT key sets by their log-sum-exp. Ring attention (ring_attention.hpp) attends its
// queries to one K/V block at a time and merges each partial result into the running one with this; flash
// attention does the same across the key tiles of one GPU.
//
//   lse' = logaddexp(lse, lse_part)
//   out' = exp(lse - lse')·out + exp(lse_part - lse')·out_part
//
// Each partial out is already normalised by its own keys' sum, so the two weights are the shares of the
// total sum, and the result equals attention over both key sets at once.
//
// Playbook: "Context parallelism" (Ring Attention), "Flash attention" (online softmax).
// Test: `make test CH=06` (tests/06_context_parallel/test_online_softmax.cpp).
#pragma once
#include "../common/tensor.hpp"

namespace penta {

// In place on out (B, T, nh, hd) and lse (B, nh, T), all f32 on one device: a row whose lse is -inf (no
// key seen yet) takes the part as it is, whatever out held; a part whose lse is -inf changes nothing. The
// CPU merge is here; a cuda tensor goes to the same merge's kernel (ops.hpp attention_merge_gpu).
void online_softmax_merge(Tensor& out, Tensor& lse, const Tensor& out_part, const Tensor& lse_part);

}  // namespace penta
