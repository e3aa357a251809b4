// equivalence.cpp — the single-rank reference run and the per-tensor weight comparison of equivalence.hpp.
// Run the tests that use them: `make test CH=02` (and CH=03, 04, 05).
#include "equivalence.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "../../common/runtime.hpp"

namespace penta::testing {

PrecisionHooks& precision_hooks() {
    static PrecisionHooks hooks;
    return hooks;
}

std::unique_ptr<StepHooks> add_precision_hooks(Trainer& t, const Precision& precision) {
    std::unique_ptr<StepHooks> h = precision_hooks() ? precision_hooks()(precision) : nullptr;
    if (h) t.hooks.push_back(h.get());
    return h;
}

namespace {

// `steps` steps of `model` on the global batch of `rows` sequences, cut into micro-batches of `micro_batch`
void train_into(Model& model, const AdamWConfig& adamw, const Dataset& data, int64_t seq, int64_t rows,
                int64_t micro_batch, int64_t steps, const std::function<float(int64_t)>& lr, float clip,
                std::vector<double>& losses, std::vector<double>& norms, std::vector<float>& params) {
    AdamW optim(model.params(), model.grads(), optimizer_ranges(model), adamw, model.precision().fp32_master);
    Trainer trainer{model, optim};
    const std::unique_ptr<StepHooks> scaler = add_precision_hooks(trainer, model.precision());  // fp16: chapter 11's
    BatchPlan plan;
    plan.seq = seq;
    plan.global_batch = rows;
    plan.micro_batch = micro_batch;
    plan.grad_accum = rows / micro_batch;  // first_row 0
    for (int64_t s = 0; s < steps; s++) {
        StepResult r = training_step(trainer, data, s, plan, lr(s), clip);
        losses.push_back(r.loss);
        norms.push_back(r.grad_norm);
    }
    params = model.params().to_host();
}

}  // namespace

Trained train_reference(Model& model, const AdamWConfig& adamw, const Dataset& data, int64_t seq, int64_t rows,
                        int64_t steps, const std::function<float(int64_t)>& lr, float clip) {
    // the reordered run: a copy of the model from the same weights, on the other attention kernel
    ModelOptions o = model.options();
    REQUIRE_MESSAGE(!o.attention_core, "train_reference: a custom attention core (the reordered run swaps the kernel)");
    o.attention = o.attention == AttentionKernel::naive ? AttentionKernel::flash : AttentionKernel::naive;
    Model copy_of(model.config(), model.device(), model.seed(), o);
    copy(copy_of.params(), model.params());
    Trained t;
    train_into(model, adamw, data, seq, rows, rows, steps, lr, clip, t.losses, t.norms, t.params);
    train_into(copy_of, adamw, data, seq, rows, 1, steps, lr, clip, t.reordered_losses, t.reordered_norms,
               t.reordered_params);
    t.reordering = strfmt("%lld micro-batch%s of one sequence, %s attention", (long long)rows, rows > 1 ? "es" : "",
                          o.attention == AttentionKernel::naive ? "naive" : "flash");
    t.param_dtype = model.precision().param;
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
    REQUIRE_MESSAGE(ref.reordered_params.size() == ref.params.size(),
                    "the reference has no reordered run (train_reference makes it)");
    double reorder_dev = 0;  // the reordered run's largest relative deviation in a loss or a norm
    for (size_t s = 0; s < ref.losses.size(); s++) {
        INFO("step " << s + 1 << ": loss " << got.losses[s] << " vs " << ref.losses[s] << ", grad norm "
                     << got.norms[s] << " vs " << ref.norms[s]);
        CHECK(std::abs(got.losses[s] - ref.losses[s]) <= rtol * std::abs(ref.losses[s]));
        CHECK(std::abs(got.norms[s] - ref.norms[s]) <= rtol * std::abs(ref.norms[s]));
        reorder_dev = std::max({reorder_dev, std::abs(ref.reordered_losses[s] - ref.losses[s]) / std::abs(ref.losses[s]),
                                std::abs(ref.reordered_norms[s] - ref.norms[s]) / std::abs(ref.norms[s])});
    }
    CHECK_MESSAGE(reorder_dev <= rtol / 10, "reordering alone (" << ref.reordering << ") moves a loss or a grad norm by "
                                            << reorder_dev << " relative: rtol " << rtol << " must be 10x that");
    // the weights, per tensor, against the spread reordering alone produces there
    double worst = 0;  // largest |got - ref| / allowed
    std::string worst_at;
    // the gap between the stored value x and its neighbour away from zero (0: the smallest subnormal)
    const int mantissa = ref.param_dtype == DType::bf16 ? 7 : ref.param_dtype == DType::f16 ? 10 : 23;
    const int min_exp = ref.param_dtype == DType::bf16 ? -126 : ref.param_dtype == DType::f16 ? -14 : -126;
    const auto quantum = [&](float x) {
        return std::ldexp(1.0, std::max(x == 0 ? min_exp : std::ilogb(x), min_exp) - mantissa);
    };
    int64_t one_quantum = 0;  // elements of a bf16 / f16 run one or two quanta from the reference
    for (const ParamTensor& t : layout.tensors) {
        double scale = 0, spread = 0;
        for (int64_t i = t.offset; i < t.offset + t.numel(); i++) {
            scale = std::max(scale, (double)std::fabs(ref.params[i]));
            spread = std::max(spread, (double)std::fabs(ref.reordered_params[i] - ref.params[i]));
        }
        const double allowed = kWeightSpread * spread + 1e-6 * scale;
        double dev = 0;
        int64_t at = 0;
        for (int64_t i = t.offset; i < t.offset + t.numel(); i++) {
            const double d = std::fabs((double)got.params[i] - ref.params[i]);
            if (d > allowed && ref.param_dtype != DType::f32 && d <= 2 * quantum(ref.params[i])) {
                one_quantum++;
                continue;
            }
            if (!(d <= dev)) dev = d, at = i;  // NaN included
        }
        CHECK_MESSAGE(dev <= allowed, what << strfmt(" after %zu steps: ", ref.losses.size()) << t.name << " element "
                                           << at - t.offset << " is " << got.params[at] << ", reference " << ref.params[at]
                                           << ": |diff| " << dev << " > " << kWeightSpread << " x " << spread
                                           << " (what " << ref.reordering << " moves this tensor) + 1e-6 x " << scale);
        if (allowed > 0 && dev / allowed > worst) worst = dev / allowed, worst_at = t.name;
    }
    if (world_rank() == 0)
        std::printf("%s: weights at most %.2g of their tolerance (%s)%s; reordering (%s) moves losses and norms by "
                    "%.1e\n", what.c_str(), worst, worst_at.c_str(),
                    ref.param_dtype == DType::f32 ? ""
                        : strfmt(", %lld %s weights one or two quanta apart", (long long)one_quantum,
                                 dtype_name(ref.param_dtype)).c_str(),
                    ref.reordering.c_str(), reorder_dev);
}

}  // namespace penta::testing
