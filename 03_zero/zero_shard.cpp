// zero_shard.cpp — ZeRO's per-unit shards of the flat buffer (zero_shard.hpp).
// Playbook: "Zero Redundancy Optimizer (ZeRO)". Test: `mpirun -np 2 build/bin/tests_03 -ts='ch03 np2'`.
#include "zero_shard.hpp"

#include "../common/ops.hpp"

namespace penta {

UnitShards::UnitShards(const ParamLayout& layout, int ranks, int rank) : layout_(layout) {
    for (int u = 0; u < (int)layout.units.size(); u++) add_piece(u, ranks, rank);
}

UnitShards::UnitShards(const ParamLayout& layout, const ReduceGroups& groups) : layout_(layout) {
    for (int u = 0; u < (int)layout.units.size(); u++) {
        if (layout.units[u].numel == 0) {  // a pipeline stage's absent unit: nothing to cut
            add_piece(u, 1, 0);
            continue;
        }
        Comm& g = groups.of(layout.units[u]);
        add_piece(u, g.size(), g.rank());
    }
}

void UnitShards::add_piece(int u, int ranks, int rank) {
    const ParamUnit& unit = layout_.units[u];
    ShardPiece p;
    p.unit = u;
    p.full_offset = unit.offset + part_start(unit.numel, ranks, rank);
    p.shard_offset = numel_;
    p.count = part_count(unit.numel, ranks, rank);  // 0 for an empty unit (a pipeline stage's absent one)
    numel_ += p.count;
    pieces_.push_back(p);
    ranks_.push_back(ranks);
}

Comm& UnitShards::group(const ReduceGroups& groups, int u) const {
    Comm& g = groups.of(layout_.units.at(u));
    CHECK(g.size() == ranks_[u], "unit %s was cut over %d ranks, but its group %s has %d",
          layout_.units[u].name.c_str(), ranks_[u], g.name().c_str(), g.size());
    return g;
}

std::vector<ParamRange> UnitShards::shard_ranges(const std::vector<ParamRange>& full) const {
    std::vector<ParamRange> out;
    for (const ShardPiece& p : pieces_)
        for (ParamRange r : ranges_in_shard(full, p.full_offset, p.count)) {
            r.offset += p.shard_offset;
            out.push_back(r);
        }
    return out;
}

Tensor UnitShards::unit_of(const Tensor& flat, int u) const {
    return flat.flat(layout_.units[u].offset, layout_.units[u].numel);
}

Tensor UnitShards::piece_of(const Tensor& shard, int u) const {
    return shard.flat(pieces_[u].shard_offset, pieces_[u].count);
}

void UnitShards::copy_from_full(const Tensor& full, Tensor& shard) const {
    for (const ShardPiece& p : pieces_) {
        Tensor dst = piece_of(shard, p.unit);
        copy(dst, full.flat(p.full_offset, p.count));
    }
}

void UnitShards::all_gather(const ReduceGroups& groups, const Tensor& shard, Tensor& full) const {
    std::vector<CommHandle> inflight = all_gather_start(groups, shard, full);
    for (CommHandle& h : inflight) h.wait();
}

std::vector<CommHandle> UnitShards::all_gather_start(const ReduceGroups& groups, const Tensor& shard,
                                                     Tensor& full) const {
    std::vector<CommHandle> inflight(layout_.units.size());
    for (const ShardPiece& p : pieces_) {
        if (layout_.units[p.unit].numel == 0) continue;
        Tensor out = unit_of(full, p.unit);  // (unit numel)
        inflight[p.unit] = group(groups, p.unit).all_gather_async(piece_of(shard, p.unit), out);
    }
    return inflight;
}

void UnitShards::reduce_scatter(const ReduceGroups& groups, const Tensor& full, Tensor& shard) const {
    std::vector<CommHandle> inflight;
    for (const ShardPiece& p : pieces_) {
        if (layout_.units[p.unit].numel == 0) continue;
        Tensor out = piece_of(shard, p.unit);  // (this rank's part of the unit)
        inflight.push_back(group(groups, p.unit).reduce_scatter_async(unit_of(full, p.unit), out));
    }
    for (CommHandle& h : inflight) h.wait();
}

void UnitShards::init(const FillWeights& fill, Tensor& shard) const {
    for (const ShardPiece& p : pieces_) {
        const ParamUnit& unit = layout_.units[p.unit];
        if (unit.numel == 0) continue;
        // the layout of this unit alone: init_params keys every value by (seed, name, index in the FULL
        // tensor), never by the flat offset, and a checkpoint reads by name, so the unit initialises exactly
        // as inside the whole buffer
        ParamLayout one = layout_;
        one.tensors.clear();
        for (int t : unit.tensors) {
            ParamTensor pt = layout_.tensors[t];
            pt.offset -= unit.offset;
            one.tensors.push_back(pt);
        }
        one.numel = unit.numel;
        Tensor whole = Tensor::empty({unit.numel}, shard.dtype, shard.device(), Tag::workspace);  // transient
        fill(one, whole);
        Tensor dst = piece_of(shard, p.unit);
        copy(dst, whole.flat(p.full_offset - unit.offset, p.count));
    }
}

}  // namespace penta
