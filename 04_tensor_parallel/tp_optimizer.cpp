// tp_optimizer.cpp — make_tp_optimizer (tp_optimizer.hpp).
// Test: `make test CH=04`.
#include "tp_optimizer.hpp"

namespace penta {

TensorParallelOptimizer make_tp_optimizer(Model& model, ParallelGrid& grid, int64_t zero, const AdamWConfig& ac,
                                          Comm* data, Axes data_axes) {
    Comm& group = data ? *data : grid.dp();
    // each unit over its group: the model over `group`, a MoE's experts over edp (reduce_groups.hpp)
    const ReduceGroups groups(group, data_axes, grid.edp());
    TensorParallelOptimizer o;
    if (zero > 0) {
        o.zero = std::make_unique<ZeroHooks>(model, groups, parse_zero_stage(zero), ac, &grid, data_axes);
        o.optim = &o.zero->optimizer();
        o.hooks.push_back(o.zero.get());
        return o;
    }
    o.own_optim = make_adamw(model, ac, &grid);
    o.optim = o.own_optim.get();
    if (group.size() > 1) {
        o.dp_hooks = std::make_unique<DataParallelHooks>(model, groups);
        o.hooks.push_back(o.dp_hooks.get());
    }
    return o;
}

}  // namespace penta
