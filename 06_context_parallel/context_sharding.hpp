// context_sharding.hpp — which tokens of every sequence a context-parallel rank holds: contiguous chunks or
// zig-zag pairs of chunks. Each held token keeps its global position (RoPE rotates by it, the causal mask
// compares it), so the model never needs to know the sequence was cut.
//
//   contiguous (cp 4):  the sequence in 4 chunks, rank r holds chunk r
//       rank:   0 0 0 0 | 1 1 1 1 | 2 2 2 2 | 3 3 3 3
//   zig-zag (cp 4):     the sequence in 8 chunks, rank r holds chunks r and 2·cp-1-r
//       rank:   0 0 | 1 1 | 2 2 | 3 3 | 3 3 | 2 2 | 1 1 | 0 0
//
// Under a causal mask, query chunk a attends to key chunks 0..a: with contiguous chunks the last rank has cp
// blocks of work and the first has one; zig-zag pairs an early chunk with a late one, so every rank has
// exactly 2·cp + 1 blocks (of the smaller chunk size): the balance the playbook's "Zig-Zag Ring Attention" is for.
//
// Playbook: "Context parallelism" (Ring Attention, Zig-Zag Ring Attention).
// Test: `make test CH=06` (tests/06_context_parallel/test_cp.cpp).
#pragma once
#include <string>
#include <vector>

#include "../common/training_step.hpp"

namespace penta {

enum class CpShard { contiguous, zigzag };
CpShard parse_cp_shard(const std::string& flag_value);  // contiguous | zigzag; the error names --cp-shard
const char* cp_shard_name(CpShard s);

class ContextSharder : public SequenceSharder {
   public:
    ContextSharder(int cp, int rank, CpShard shard);
    int cp() const { return cp_; }
    int rank() const { return rank_; }
    CpShard shard() const { return shard_; }
    // the sequence is cut into this many equal chunks: cp (contiguous) or 2·cp (zig-zag)
    int chunks() const { return shard_ == CpShard::zigzag ? 2 * cp_ : cp_; }
    // the chunks rank r holds, in the order its tokens are laid out: {r} or {r, 2·cp-1-r}
    std::vector<int> chunks_of(int r) const;
    // throws naming --seq, the value and the rule unless a T-token sequence cuts into chunks() equal chunks
    void check_seq(int64_t T) const;
    // the positions of this rank's tokens: its chunks, each in order
    std::vector<int32_t> positions(int64_t T) const override;
    std::string describe() const override;

   private:
    int cp_, rank_;
    CpShard shard_;
};

// Attention work of rank r for a causal mask, in blocks of (chunk × chunk) and in visible (query, key)
// pairs, for a T-token sequence: what the ring computes (blocks wholly in the future are skipped)
struct CausalWork {
    int64_t blocks = 0;  // (query chunk, key chunk) pairs with key chunk <= query chunk
    int64_t pairs = 0;   // visible (query, key) pairs inside them
};
CausalWork causal_work(const ContextSharder& s, int r, int64_t T);

}  // namespace penta
