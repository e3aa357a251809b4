// dispatch_plan.hpp — where each token's copies go: the expert capacity, which copies it drops, and each kept
// copy's row in the buffer sent to the experts (sorted by expert, so each ep rank's experts are one run).
//
// Playbook: "Expert parallelism"; the capacity is GShard's (Lepikhin et al. 2020) and the Switch
// Transformer's: an expert takes at most C copies per group of tokens, and the copies beyond are dropped —
// their token skips the expert and keeps only its residual (and its other choices). Here a group is ONE
// SEQUENCE, so the rule does not depend on the layout: whichever rank, micro-batch or expert-parallel
// degree holds a sequence, the same copies are dropped (tests/08_expert_parallel/test_ep.cpp trains ep 2
// with dropping like ep 1):
//   C = ceil(capacity_factor · k · T / E) copies per expert and sequence of T tokens;
//   priority: every token's first choice before any second choice (GShard), tokens in sequence order;
//   capacity_factor 0: no capacity, nothing dropped (Mixtral's no-drop mode).
// Computed on the host: the all-to-all needs the counts on the host anyway (MPI's and NCCL's counts are host
// integers), so the token ids come over once per layer, as Megatron-LM's dispatcher syncs its counts.
// Test: `make test CH=08` (tests/08_expert_parallel/test_moe_layer.cpp).
#pragma once
#include <cstdint>
#include <vector>

namespace penta {

struct DispatchPlan {
    int64_t N = 0, k = 0, E = 0;
    int64_t capacity = -1;            // copies per expert and sequence; -1: none
    std::vector<int32_t> pos;         // (N k): each choice's row in the send buffer, -1 when dropped
    std::vector<int64_t> routed;      // (E): choices per expert, before the capacity
    std::vector<int64_t> kept;        // (E): copies per expert the buffer holds (rows, expert after expert)
    int64_t rows() const;             // the buffer's rows: sum of kept
    int64_t dropped() const;          // sum of routed - rows()
};

// experts (N k) i32: the router's choices of N = B·T token rows (B sequences of T, row n = b·T + t), k per
// token, highest first. Within an expert, its copies are in token order.
DispatchPlan plan_dispatch(const std::vector<int32_t>& experts, int64_t B, int64_t T, int64_t k, int64_t E,
                           double capacity_factor);

// the capacity of one sequence: ceil(capacity_factor · k · T / E), -1 when capacity_factor is 0
int64_t expert_capacity(double capacity_factor, int64_t k, int64_t T, int64_t E);

}  // namespace penta
