// grid.cpp — see grid.hpp: rank <-> coordinates, the shape checks, and one Comm::split per axis.
// Playbook: "5D parallelism in a nutshell". Test: `mpirun -np 4 build/bin/tests_02 -ts='ch02 np4' -tc='*grid*'`.
#include "grid.hpp"

#include "core.hpp"

namespace penta {

std::string GridShape::str() const {
    return strfmt("dp %d × pp %d × cp %d × tp %d (ep %d)", dp, pp, cp, tp, ep);
}

GridCoords grid_coords(const GridShape& s, int rank) {
    GridCoords c;
    c.tp = rank % s.tp;
    rank /= s.tp;
    c.cp = rank % s.cp;
    rank /= s.cp;
    c.dp = rank % s.dp;
    c.pp = rank / s.dp;
    const int d = c.cp + s.cp * c.dp;  // position in the dp × cp plane
    c.ep = d % s.ep;
    c.edp = d / s.ep;
    return c;
}

int grid_rank(const GridShape& s, const GridCoords& c) { return c.tp + s.tp * (c.cp + s.cp * (c.dp + s.dp * c.pp)); }

void validate_grid(const GridShape& s, int world, const LlamaConfig* cfg) {
    CHECK(s.dp >= 1 && s.pp >= 1 && s.cp >= 1 && s.tp >= 1 && s.ep >= 1,
          "--dp %d --pp %d --cp %d --tp %d --ep %d: every degree must be >= 1", s.dp, s.pp, s.cp, s.tp, s.ep);
    CHECK(s.ranks() == world,
          "--dp %d × --pp %d × --cp %d × --tp %d = %d ranks, but the job has %d (mpirun -np): the product of the "
          "degrees must equal the number of ranks",
          s.dp, s.pp, s.cp, s.tp, s.ranks(), world);
    CHECK((s.dp * s.cp) % s.ep == 0, "--ep %d must divide --dp %d × --cp %d = %d: experts are spread over the dp × cp ranks",
          s.ep, s.dp, s.cp, s.dp * s.cp);
    if (!cfg) return;
    CHECK(cfg->n_kv_heads % s.tp == 0,
          "--tp %d must divide the model's %lld key/value heads (%s): TP gives each rank whole kv heads", s.tp,
          (long long)cfg->n_kv_heads, cfg->name.c_str());
    CHECK(cfg->n_heads % s.tp == 0, "--tp %d must divide the model's %lld attention heads (%s)", s.tp,
          (long long)cfg->n_heads, cfg->name.c_str());
    CHECK(cfg->ffn % s.tp == 0, "--tp %d must divide the model's MLP width %lld (%s)", s.tp, (long long)cfg->ffn,
          cfg->name.c_str());
    CHECK(s.pp <= cfg->n_layers, "--pp %d must be <= the model's %lld layers (%s): every stage needs a layer", s.pp,
          (long long)cfg->n_layers, cfg->name.c_str());
}

ParallelGrid::ParallelGrid(std::unique_ptr<Comm> world, const GridShape& shape, const LlamaConfig* cfg)
    : shape_(shape), world_(std::move(world)) {
    validate_grid(shape_, world_->size(), cfg);
    const GridShape& s = shape_;
    me_ = grid_coords(s, world_->rank());
    const GridCoords& c = me_;
    // color = the coordinates the group shares, key = the coordinate that varies within it
    dp_ = world_->split(c.pp * s.cp * s.tp + c.cp * s.tp + c.tp, c.dp, "dp");
    pp_ = world_->split((c.dp * s.cp + c.cp) * s.tp + c.tp, c.pp, "pp");
    cp_ = world_->split((c.pp * s.dp + c.dp) * s.tp + c.tp, c.cp, "cp");
    tp_ = world_->split((c.pp * s.dp + c.dp) * s.cp + c.cp, c.tp, "tp");
    dp_cp_ = world_->split(c.pp * s.tp + c.tp, c.dp * s.cp + c.cp, "dp×cp");
    ep_ = world_->split((c.pp * s.tp + c.tp) * (s.dp * s.cp / s.ep) + c.edp, c.ep, "ep");
    edp_ = world_->split((c.pp * s.tp + c.tp) * s.ep + c.ep, c.edp, "edp");
}

std::string ParallelGrid::describe() const {
    return strfmt("rank %d = (pp %d, dp %d, cp %d, tp %d; ep %d, edp %d) of %s", world_->rank(), me_.pp, me_.dp,
                  me_.cp, me_.tp, me_.ep, me_.edp, shape_.str().c_str());
}

}  // namespace penta
