// cores_testing.hpp — an MLP core for the tests of the seams (chapter 01) and of the hooks that must refuse
// what they cannot reduce (chapters 02, 03): TwoMlps declares a unit of its own, sharded over ep the way a
// MoE core's experts will be, and adds an aux loss. Header only.
// Playbook: "Expert parallelism" (the seam it will use). Run the tests that use it: `make test CH=01`.
#pragma once
#include "../../common/ops.hpp"
#include "../../common/spine.hpp"

namespace penta::testing {

// y = SwiGLU_shared(x) + SwiGLU_extra(x): the shared MLP in the layer's unit, the extra one in a unit of
// its own ("layer i extra", sharded over ep like a MoE core's experts); aux loss 0.25 per layer, a constant
// (its gradient is 0), so the step must report it without it changing any gradient.
class TwoMlps : public MlpCore {
   public:
    void declare(LayoutBuilder& b) const override {
        shared_.declare(b);
        b.begin_unit("layer " + std::to_string(b.layer()) + " extra", b.layer(), true, kAxisDP | kAxisCP, kAxisEP);
        extra_.declare(b);
        b.end_unit();
    }
    bool has_aux_loss() const override { return true; }
    std::unique_ptr<MlpActs> forward(const LlamaConfig& c, const LayerParams& w, const MicroBatch& mb, double tokens,
                                     const Tensor& x, Tensor& y, Tag saved) override {
        auto a = std::make_unique<Acts>();
        a->shared = shared_.forward(c, w, mb, tokens, x, y, saved);
        Tensor y2;
        a->extra = extra_.forward(c, w, mb, tokens, x, y2, saved);
        add_inplace(y, y2);
        a->aux_loss = 0.25;
        return a;
    }
    Tensor backward_input(const LayerParams& w, MlpActs& acts, const Tensor& dy, Tag keep) override {
        Acts& a = static_cast<Acts&>(acts);
        Tensor dx = shared_.backward_input(w, *a.shared, dy, keep);
        add_inplace(dx, extra_.backward_input(w, *a.extra, dy, keep));
        return dx;
    }
    void backward_weight(LayerParams& g, const Tensor& x, MlpActs& acts) override {
        Acts& a = static_cast<Acts&>(acts);
        shared_.backward_weight(g, x, *a.shared);
        extra_.backward_weight(g, x, *a.extra);
    }

   private:
    struct Acts : MlpActs {
        std::unique_ptr<MlpActs> shared, extra;
    };
    mutable DenseSwiGLU shared_{"mlp."}, extra_{"extra."};
};

}  // namespace penta::testing
