// expert_dispatch.hpp — expert parallelism's communication: token copies to the ranks that hold their
// experts and the experts' outputs back, by all-to-all-v over the ep group.
//
// Playbook: "Expert parallelism" — each of the ep ranks holds E/ep of the E experts (rank q: experts
// [q·E/ep, (q+1)·E/ep)); its tokens' copies for the other ranks' experts travel there and back:
//
//   send buffer (rows by expert)         all-to-all-v          received (by source rank)    local permute
//   [e0 e1 | e2 e3 | e4 e5 | e6 e7]  ── rows for rank q ──►  [from 0 | from 1 | ...]  ──►  [e2: all sources | e3: ...]
//          to 0    to 1    to 2 ...                                                         each expert's rows one run
//
// 1. counts first: each rank tells every other how many copies it sends each of its experts (an all-to-all
//    of E/ep int32 per peer), so every rank knows what it receives and where each expert's rows start;
// 2. dispatch: all-to-all-v of the copies (h values each), then a local permutation so each local expert's
//    rows from every source are contiguous (one matmul per expert);
// 3. combine: the inverse — permute back, all-to-all-v the outputs to where their tokens live.
// Backward mirrors it: d outputs go the dispatch's way (to_experts), d inputs the combine's (from_experts).
// The copies for this rank's own experts never leave it, so a rank sends, per layer and direction,
// h·4 bytes for each copy bound elsewhere (formulas.hpp: ep_layer_all_to_all_bytes).
// With ep = 1 the all-to-alls go to this rank only: the same code, nothing sent.
// Test: `make test CH=08` (tests/08_expert_parallel/test_ep.cpp: ep 2 and 4 against one rank, bytes = formula).
#pragma once
#include <vector>

#include "../common/comm.hpp"
#include "dispatch_plan.hpp"

namespace penta {

// One layer's exchange for one micro-batch: who sends what to whom, after the counts' all-to-all.
struct ExpertExchange {
    std::vector<int64_t> send_rows;   // (ep) copies this rank sends to each rank (its own included)
    std::vector<int64_t> recv_rows;   // (ep) copies it receives from each
    std::vector<int64_t> local_rows;  // (E/ep) copies each local expert computes, from every source
    Tensor perm;                      // (received, 1) i32: received row (by source) -> its row by expert
    int64_t received() const;         // rows the local experts compute
};

class ExpertDispatch {
   public:
    // ep: the expert-parallel group (its size divides E); E experts of hidden size h
    ExpertDispatch(Comm& ep, int64_t E, int64_t h);
    int experts_per_rank() const { return (int)(E_ / ep_.size()); }
    int first_expert() const { return ep_.rank() * experts_per_rank(); }  // this rank's experts start here
    Comm& group() const { return ep_; }

    // 1. the counts' all-to-all: plan.kept per expert -> what every rank sends and receives
    ExpertExchange exchange_counts(const DispatchPlan& plan, Device device);
    // 2. rows (sent, h) in the send order (by expert) -> (received, h) by local expert, allocated with tag
    Tensor to_experts(const ExpertExchange& x, const Tensor& rows, Tag tag);
    // 3. rows (received, h) by local expert -> (sent, h) back in the send order, allocated with tag
    Tensor from_experts(const ExpertExchange& x, const Tensor& rows, Tag tag);

   private:
    Comm& ep_;
    int64_t E_, h_;
};

}  // namespace penta
