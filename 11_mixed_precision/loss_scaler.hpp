// loss_scaler.hpp — fp16's dynamic loss scaling: a small state machine that keeps the gradients inside f16's
// range. The loss gradient is multiplied by the scale S before backward (so gradients far below f16's
// smallest subnormal, 6e-8, survive the GEMMs that read them in f16) and the update divides it out again.
//
// Playbook: "Mixed precision training" — fp16 has too little range for gradients, hence loss scaling; when a
// scaled gradient overflows (inf/NaN) the step is skipped and S backed off; after N clean steps S grows again,
// so S tracks the largest scale the gradients tolerate. The state machine (update):
//
//   overflow (a gradient not finite)  -> skip the step, S *= backoff (0.5), clean steps = 0
//   finite                            -> take the step, clean steps += 1; at growth_interval: S *= growth (2), 0
//
// It is one of the step's hooks (common/training_step.hpp's StepHooks): the step asks it for S before the
// first micro-batch, and after backward, where the global gradient norm is checked, whether to take the update.
// The norm is one all-reduce over every rank, so every rank of any layout skips the same steps. bf16 needs no
// scaler: it has f32's exponent range.
// Test: `make test CH=11` (build/bin/tests_11 -tc='*scaler*').
#pragma once
#include <cstdint>
#include <optional>

#include "../common/training_step.hpp"

namespace penta {

struct LossScalerConfig {
    float initial = 65536.0f;       // 2^16, PyTorch's GradScaler's start
    float backoff = 0.5f;           // on overflow
    float growth = 2.0f;            // after growth_interval clean steps
    int64_t growth_interval = 100;  // clean steps before S grows (PyTorch: 2000; 100 shows growth in a short run)
};

class LossScaler : public StepHooks {
   public:
    explicit LossScaler(LossScalerConfig cfg = {});
    float scale() const { return scale_; }
    // After backward, told whether every gradient is finite. Returns whether the optimizer may step.
    // Throws when S falls below 2^-24: then the gradients overflow whatever the scale (the model diverged).
    bool update(bool grads_finite);
    int64_t clean_steps() const { return clean_; }
    int64_t skipped() const { return skipped_; }

    // as the step's hook: S for this step's loss gradient, and the state machine above after backward
    std::optional<float> loss_scale() const override { return scale_; }
    bool take_update(bool grads_finite) override { return update(grads_finite); }

   private:
    LossScalerConfig cfg_;
    float scale_;
    int64_t clean_ = 0, skipped_ = 0;
};

}  // namespace penta
