// sdc_check.hpp — silent data corruption: the data-parallel replicas hold the same parameters, bit for bit, after
// every step (the same initial weights, the same all-reduced gradients, the same AdamW). A bit flipped by a bad
// chip or a bad link breaks that and nothing reports it: the loss goes on looking normal. This hook compares a
// checksum of every replica's parameters every N steps; the replica whose checksum the majority does not share
// is named (with its first differing tensor), and the job stops.
//
// Seed 003, "检查点与容错": hangs, stragglers and silent data corruption do not report themselves; they are
// found by timeouts, per-rank monitoring and cross-replica comparison. Cheap: two scalars per replica every N
// steps (Comm::all_gather_scalar, counted apart from the gradient bytes), plus a pass over the weights to hash them.
//   mpirun -np 3 build/bin/02_data_parallel --dp 3 --sdc-check 2 --sdc-flip-bit 1:3   (caught at step 4, rank 1)
// Test: tests/02_data_parallel/test_sdc.cpp (`mpirun -np 3 build/bin/tests_02 -ts='ch02 np3' -tc='SDC*'`).
#pragma once
#include <cstdint>
#include <string>

#include "../common/model.hpp"
#include "../common/training_step.hpp"

namespace penta {

struct SdcOptions {
    int64_t every = 0;      // --sdc-check N: compare after every N-th step (0: never)
    int flip_rank = -1;     // --sdc-flip-bit RANK:STEP: after STEP's update, dp rank RANK flips one bit of one
    int64_t flip_step = 0;  // weight (a fault injected on purpose, to see it caught); -1: none
};
// "RANK:STEP" -> flip_rank, flip_step; names the flag and the rule when it is not two integers >= 0 / >= 1
void parse_sdc_flip(const std::string& value, SdcOptions& opt);

// FNV-1a over the f32 bit patterns of x's elements (bf16 / f16 widen exactly to f32, so equal tensors hash
// equally and any flipped bit changes the hash)
uint64_t bit_checksum(const Tensor& x);

class SdcCheck : public StepHooks {
   public:
    SdcCheck(Model& model, Comm& dp, SdcOptions opt);
    void after_update() override;  // counts the step; flips the bit when asked; compares every N steps
    int64_t checks() const { return checks_; }  // comparisons made so far

   private:
    // every replica's checksum of x, in dp rank order (exact: the 64 bits travel as two 32-bit halves)
    std::vector<uint64_t> gather(uint64_t mine) const;
    Model& model_;
    Comm& dp_;
    SdcOptions opt_;
    int64_t step_ = 0, checks_ = 0;
};

}  // namespace penta
