// grid.hpp — ParallelGrid: the world's ranks arranged as (pp, dp, cp, tp), and one Comm per axis.
//
// Rank order, fastest-varying first (Megatron-LM's convention):
//   rank = tp_i + tp · (cp_i + cp · (dp_i + dp · pp_i))
// tp is fastest because TP communicates inside every layer, several times per micro-batch: consecutive
// ranks are on one node (NVLink). pp is slowest: it sends one activation per micro-batch and can cross
// nodes. Expert parallelism is carved from the dp × cp plane: its ranks d = cp_i + cp · dp_i form
// groups of ep consecutive d (ep_i = d mod ep), and expert-data-parallel (edp) joins equal ep_i.
//
//   world 8 = dp 2 × tp 4:   ranks 0-3 are tp group of dp 0, ranks 4-7 of dp 1; dp groups {0,4} {1,5} ...
//
// Every shape is checked before any work (validate_grid): the product must be the world size, and the
// model must be divisible the way each axis cuts it; the error names the flags and the rule.
// Playbook: "5D parallelism in a nutshell", "Tensor parallelism" (keep TP within a node).
// Test: `build/bin/tests_02 -ts='ch02 np4'` (tests/02_data_parallel/test_grid.cpp).
#pragma once
#include <memory>
#include <string>

#include "comm.hpp"
#include "model_config.hpp"

namespace penta {

struct GridShape {
    int dp = 1, pp = 1, cp = 1, tp = 1, ep = 1;
    int ranks() const { return dp * pp * cp * tp; }
    std::string str() const;  // "dp 2 × pp 1 × cp 1 × tp 4 (ep 1)"
};

struct GridCoords {
    int dp = 0, pp = 0, cp = 0, tp = 0, ep = 0, edp = 0;
};

GridCoords grid_coords(const GridShape& s, int rank);
int grid_rank(const GridShape& s, const GridCoords& c);  // ep/edp ignored: they follow from dp, cp

// Throws penta::Error naming the flags (--dp, --tp, ...) and the rule when the shape does not fit the
// world or the model (cfg may be null: only the world rules are checked).
void validate_grid(const GridShape& s, int world_size, const LlamaConfig* cfg);

class ParallelGrid {
   public:
    // Collective over world: splits it into the axis groups. validate_grid first.
    ParallelGrid(std::unique_ptr<Comm> world, const GridShape& shape, const LlamaConfig* cfg = nullptr);
    const GridShape& shape() const { return shape_; }
    const GridCoords& coords() const { return me_; }
    Comm& world() { return *world_; }
    Comm& dp() { return *dp_; }      // same pp, cp, tp: gradient all-reduce, ZeRO shards
    Comm& pp() { return *pp_; }      // same dp, cp, tp: the stages of one pipeline
    Comm& cp() { return *cp_; }      // same pp, dp, tp: the ring of context parallelism
    Comm& tp() { return *tp_; }      // same pp, dp, cp: the tensor-parallel group
    Comm& dp_cp() { return *dp_cp_; }// same pp, tp: dense gradients are reduced over dp AND cp
    Comm& ep() { return *ep_; }      // expert-parallel group (all-to-all)
    Comm& edp() { return *edp_; }    // replicas of the same experts: expert gradient reduction
    std::string describe() const;    // "rank 5 = (pp 0, dp 1, cp 0, tp 1; ep 1, edp 0) of <shape>"

   private:
    GridShape shape_;
    GridCoords me_;
    std::unique_ptr<Comm> world_, dp_, pp_, cp_, tp_, dp_cp_, ep_, edp_;
};

}  // namespace penta
