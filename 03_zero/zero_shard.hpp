// zero_shard.hpp — how ZeRO cuts the flat parameter/gradient buffer over the data-parallel ranks.
//
// Every unit of the flat buffer (embedding, each decoder layer, the head: model_layout.hpp) is cut into N
// parts by comm.hpp's part_count — the first n % N ranks get one element more, nothing is padded — and
// rank r's shard is its part of every unit, concatenated in unit order:
//
//   flat buffer   | embedding          | layer 0            | layer 1            | head          |
//   rank 0 shard  | e0 |               | l0 |               | m0 |               | h0 |
//   rank 1 shard       | e1 |               | l1 |               | m1 |               | h1 |   ...
//
// Why per unit and not one contiguous 1/N range of the whole buffer: ZeRO-2 reduce-scatters a unit's
// gradients the moment backward finishes it, and ZeRO-3 all-gathers a unit's weights just before forward
// needs them. A collective over one unit hands rank r exactly part_count(unit, N, r) elements, so the
// shard must be made of those parts (PyTorch FSDP shards each "flat parameter" the same way). ZeRO-1 uses
// the same shards, so the three stages differ only in what else they shard, and their optimizer states
// are identical. Shard sizes: formulas.hpp's zero_shard_numel.
//
// Each unit is cut over the ranks that sum its gradients (reduce_groups.hpp): for a dense model the one dp
// group; a MoE's expert units over their edp group (chapter 08), whose size N_u may differ from dp's.
// Playbook: "ZeRO (Zero Redundancy Optimizer)" — partitioning the optimizer states, gradients and
// parameters over the N data-parallel ranks. Test: `mpirun -np 4 build/bin/tests_03 -ts='ch03 np4'`.
#pragma once
#include <functional>
#include <vector>

#include "../common/comm.hpp"
#include "../common/model_layout.hpp"
#include "../common/optim.hpp"
#include "../02_data_parallel/reduce_groups.hpp"

namespace penta {

// This rank's part of one unit: flat elements [full_offset, full_offset + count) are shard elements
// [shard_offset, shard_offset + count).
struct ShardPiece {
    int unit = 0;
    int64_t full_offset = 0, shard_offset = 0, count = 0;
};

class UnitShards {
   public:
    // every unit cut over one group of `ranks`, this rank being `rank`
    UnitShards(const ParamLayout& layout, int ranks, int rank);
    // each unit cut over its own group, groups.of(unit)
    UnitShards(const ParamLayout& layout, const ReduceGroups& groups);

    int64_t numel() const { return numel_; }  // elements of this rank's shard
    const ShardPiece& piece(int unit) const { return pieces_.at(unit); }
    const ParamUnit& unit(int u) const { return layout_.units.at(u); }
    int units() const { return (int)pieces_.size(); }

    // the optimizer's ranges (full-buffer offsets, optimizer_ranges) cut to this shard, in shard offsets
    std::vector<ParamRange> shard_ranges(const std::vector<ParamRange>& full) const;
    // one unit of `flat` (the whole buffer) and this rank's piece of it in `shard`
    Tensor unit_of(const Tensor& flat, int u) const;
    Tensor piece_of(const Tensor& shard, int u) const;
    // shard <- this rank's pieces of the whole buffer (a local copy, no communication)
    void copy_from_full(const Tensor& full, Tensor& shard) const;
    // full <- every rank's pieces, one all-gather per unit over its group (started together, then waited on)
    void all_gather(const ReduceGroups& groups, const Tensor& shard, Tensor& full) const;
    // the same, left in flight: one handle per unit (indexed by unit; empty units get none), for ZeRO-1/2's
    // gather deferred into the next forward (zero1_overlap.hpp)
    std::vector<CommHandle> all_gather_start(const ReduceGroups& groups, const Tensor& shard, Tensor& full) const;
    // shard <- this rank's pieces of `full` summed over each unit's group: each unit reduce-scattered at once (ZeRO-1)
    void reduce_scatter(const ReduceGroups& groups, const Tensor& full, Tensor& shard) const;
    // the unit's group from groups, checked against the cut this shard was made with
    Comm& group(const ReduceGroups& groups, int unit) const;
    // shard <- the initial weights of this rank's pieces, exactly the slices `fill` (init_params keyed by a
    // seed, or Model::initial_weights: a checkpoint's) writes into the whole buffer; one unit at a time, so
    // no rank ever holds every weight
    using FillWeights = std::function<void(const ParamLayout& layout, Tensor& flat)>;
    void init(const FillWeights& fill, Tensor& shard) const;

   private:
    // appends unit u's piece, cut over `ranks` with this rank `rank`
    void add_piece(int u, int ranks, int rank);

    const ParamLayout& layout_;
    std::vector<ShardPiece> pieces_;  // one per unit, indexed by unit id
    std::vector<int> ranks_;          // per unit: the ranks it is cut over
    int64_t numel_ = 0;
};

}  // namespace penta
