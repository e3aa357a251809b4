// equivalence.cpp — the single-rank reference run and the per-tensor weight comparison of equivalence.hpp.
// Run the tests that use them: `make test CH=02` (and CH=03, 04, 05).
#include "equivalence.hpp"

#include <algorithm>
#include <cmath>

namespace penta::testing {

Trained train_reference(Model& model, const AdamWConfig& adamw, const Dataset& data, int64_t seq, int64_t rows,
                        int64_t steps, const std::function<float(int64_t)>& lr, float clip) {
    AdamW optim(model.params(), model.grads(), optimizer_ranges(model), adamw);
    BatchPlan plan;
    plan.seq = seq;
    plan.micro_batch = plan.global_batch = rows;  // grad_accum 1, first_row 0
    Trained t;
    for (int64_t s = 0; s < steps; s++) {
        StepResult r = training_step(model, optim, data, s, plan, lr(s), clip);
        t.losses.push_back(r.loss);
        t.norms.push_back(r.grad_norm);
    }
    t.params = model.params().to_host();
    return t;
}

double check_close_per_tensor(const LlamaConfig& cfg, const std::vector<float>& got, const std::vector<float>& ref,
                              double rtol, double atol, const std::string& what) {
    return check_close_per_tensor(ParamLayout::build(cfg), got, ref, rtol, atol, what);
}

double check_close_per_tensor(const ParamLayout& layout, const std::vector<float>& got, const std::vector<float>& ref,
                              double rtol, double atol, const std::string& what) {
    REQUIRE_MESSAGE(got.size() == ref.size(), what << ": " << got.size() << " vs " << ref.size() << " weights");
    double smallest = INFINITY;
    for (const ParamTensor& t : layout.tensors) {
        std::vector<float> a(got.begin() + t.offset, got.begin() + t.offset + t.numel());
        std::vector<float> b(ref.begin() + t.offset, ref.begin() + t.offset + t.numel());
        double scale = 0;
        for (float v : b) scale = std::max(scale, (double)std::fabs(v));
        smallest = std::min(smallest, scale);
        check_close(a, b, rtol, atol * scale, what + ": " + t.name);
    }
    return smallest;
}

void check_same_training(const Trained& got, const Trained& ref, const LlamaConfig& cfg, double rtol,
                         const std::string& what) {
    check_same_training(got, ref, ParamLayout::build(cfg), rtol, what);
}

void check_same_training(const Trained& got, const Trained& ref, const ParamLayout& layout, double rtol,
                         const std::string& what) {
    INFO(what);
    REQUIRE(got.losses.size() == ref.losses.size());
    REQUIRE(got.norms.size() == ref.norms.size());
    for (size_t s = 0; s < ref.losses.size(); s++) {
        INFO("step " << s + 1 << ": loss " << got.losses[s] << " vs " << ref.losses[s] << ", grad norm "
                     << got.norms[s] << " vs " << ref.norms[s]);
        CHECK(std::abs(got.losses[s] - ref.losses[s]) <= rtol * std::abs(ref.losses[s]));
        CHECK(std::abs(got.norms[s] - ref.norms[s]) <= rtol * std::abs(ref.norms[s]));
    }
    check_close_per_tensor(layout, got.params, ref.params, rtol, rtol,
                           what + strfmt(" after %zu steps", ref.losses.size()));
}

}  // namespace penta::testing
