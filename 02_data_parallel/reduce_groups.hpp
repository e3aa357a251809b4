// reduce_groups.hpp — over which ranks a unit's gradients are summed: the data-parallel group of a unit.
//
// A gradient is summed over the ranks that hold the SAME part of a unit and computed it from DIFFERENT tokens
// (model_layout.hpp: its sharded_on and grad_summed_on axes). For every unit of a dense model that is one
// group — dp, or dp × cp under context parallelism — which chapter 02's all-reduce and chapter 03's ZeRO
// shards span. A mixture of experts (chapter 08) cuts its experts' unit over ep, carved from the dp × cp plane
// (grid.hpp): the ranks holding the same experts are then only those of one expert-data-parallel group, edp,
// so that unit is summed (and ZeRO-sharded) over edp while the rest of the model still is over dp:
//
//   dp 4, ep 2:  dense units over {0,1,2,3};  experts 0-3 on ranks {0,2}, experts 4-7 on {1,3}: edp {0,2}, {1,3}
//
// The hooks ask of(unit) for each unit's group, so they handle any layout the same way; a unit whose group
// was not given (an expert unit when only dp is known) is refused by name.
// Playbook: "Data parallelism", "Expert parallelism" ("EP ↔ DP: the standard combination").
// Test: `make test CH=02` (refusal), `make test CH=08` (experts over edp).
#pragma once
#include <vector>

#include "../common/comm.hpp"
#include "../common/model_layout.hpp"

namespace penta {

class ReduceGroups {
   public:
    // every unit over `data`, which spans the grid axes data_axes (dp; dp | cp under context parallelism).
    // Implicit, so hooks given one group (chapters 02, 03) keep their one-group form.
    ReduceGroups(Comm& data, Axes data_axes = kAxisDP) : data_(&data), data_axes_(data_axes) {}
    // ...and the units sharded over ep over expert_data (the grid's edp)
    ReduceGroups(Comm& data, Axes data_axes, Comm& expert_data)
        : data_(&data), expert_(&expert_data), data_axes_(data_axes) {}

    // the ranks that sum this unit's gradients: expert_data for a unit sharded over ep, data otherwise;
    // throws naming the unit when its group was not given
    Comm& of(const ParamUnit& unit) const;
    Comm& data() const { return *data_; }
    Axes data_axes() const { return data_axes_; }
    // each group once (data, then expert_data when given and a different Comm)
    std::vector<Comm*> groups() const;
    // what the groups counted, summed (each group once)
    CommCounters counters() const;

   private:
    Comm* data_;
    Comm* expert_ = nullptr;
    Axes data_axes_;
};

}  // namespace penta
