// context_sharding.cpp — the contiguous and zig-zag token layouts of context parallelism
// (context_sharding.hpp).
//   mpirun -np 4 build/bin/06_context_parallel --cp 4 --cp-shard zigzag
#include "context_sharding.hpp"

namespace penta {

CpShard parse_cp_shard(const std::string& v) {
    if (v == "contiguous") return CpShard::contiguous;
    if (v == "zigzag") return CpShard::zigzag;
    FAIL("--cp-shard '%s' must be contiguous (rank r holds chunk r of cp) or zigzag (rank r holds chunks r and "
         "2·cp-1-r of 2·cp)", v.c_str());
}

const char* cp_shard_name(CpShard s) { return s == CpShard::zigzag ? "zigzag" : "contiguous"; }

ContextSharder::ContextSharder(int cp, int rank, CpShard shard) : cp_(cp), rank_(rank), shard_(shard) {
    CHECK(cp >= 1 && rank >= 0 && rank < cp, "context sharder: rank %d of cp %d", rank, cp);
}

std::vector<int> ContextSharder::chunks_of(int r) const {
    // EXERCISE 06.2 begin: zig-zag sharding: rank r holds chunks r and 2cp-1-r (contiguous: chunk r)
    if (shard_ == CpShard::contiguous) return {r};
    return {r, 2 * cp_ - 1 - r};  // an early chunk and its mirror from the end
    // EXERCISE 06.2 end
}

void ContextSharder::check_seq(int64_t T) const {
    CHECK(T % chunks() == 0,
          "--seq %ld: context parallelism with --cp %d and --cp-shard %s cuts every sequence into %d equal chunks "
          "(%s), so --seq must be a multiple of %d (e.g. %ld)",
          (long)T, cp_, cp_shard_name(shard_), chunks(), shard_ == CpShard::zigzag ? "2·cp" : "cp", chunks(),
          (long)((T / chunks() + 1) * chunks()));
}

std::vector<int32_t> ContextSharder::positions(int64_t T) const {
    check_seq(T);
    // EXERCISE 06.2 begin: the global positions of this rank's tokens, chunk after chunk
    const int64_t c = T / chunks();
    std::vector<int32_t> pos;
    for (int chunk : chunks_of(rank_))
        for (int64_t t = 0; t < c; t++) pos.push_back((int32_t)(chunk * c + t));
    return pos;
    // EXERCISE 06.2 end
}

std::string ContextSharder::describe() const {
    std::string held;
    for (int c : chunks_of(rank_)) held += (held.empty() ? "" : " and ") + std::to_string(c);
    return strfmt("cp rank %d of %d holds chunk%s %s of %d (%s)", rank_, cp_, shard_ == CpShard::zigzag ? "s" : "",
                  held.c_str(), chunks(), cp_shard_name(shard_));
}

CausalWork causal_work(const ContextSharder& s, int r, int64_t T) {
    s.check_seq(T);
    // EXERCISE 06.2 begin: the causal work of rank r: key blocks and query-key pairs of its chunks
    const int64_t c = T / s.chunks();
    CausalWork w;
    for (int a : s.chunks_of(r)) {
        w.blocks += a + 1;                        // key chunks 0 .. a
        w.pairs += (int64_t)a * c * c + c * (c + 1) / 2;  // a full blocks and the causal diagonal
    }
    return w;
    // EXERCISE 06.2 end
}

}  // namespace penta
