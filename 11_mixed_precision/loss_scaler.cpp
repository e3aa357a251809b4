// loss_scaler.cpp — see loss_scaler.hpp: dynamic loss scaling's state machine.
// Playbook: "Mixed precision training" (loss scaling). Test: `make test CH=11`.
#include "loss_scaler.hpp"

#include <cmath>

#include "../common/core.hpp"

namespace penta {

LossScaler::LossScaler(LossScalerConfig cfg) : cfg_(cfg), scale_(cfg.initial) {
    CHECK(cfg.initial > 0 && cfg.backoff > 0 && cfg.backoff < 1 && cfg.growth > 1 && cfg.growth_interval > 0,
          "loss scaler: initial %g > 0, backoff %g in (0, 1), growth %g > 1 and growth interval %lld > 0 are the rules",
          cfg.initial, cfg.backoff, cfg.growth, (long long)cfg.growth_interval);
}

bool LossScaler::update(bool grads_finite) {
    // EXERCISE 11.1 begin: the loss scaler's state machine
    if (!grads_finite) {  // overflow: this step's gradients are garbage; retry the next batch with half the scale
        scale_ *= cfg_.backoff;
        clean_ = 0;
        skipped_++;
        CHECK(scale_ >= 0x1p-24f, "loss scaler: the gradients overflow even at loss scale %g (%lld steps skipped): the "
              "model diverged; lower --lr or train in --precision bf16", scale_, (long long)skipped_);
        return false;
    }
    if (++clean_ == cfg_.growth_interval) {  // N clean steps: try a larger scale (more room under f16's subnormals)
        scale_ *= cfg_.growth;
        clean_ = 0;
    }
    return true;
    // EXERCISE 11.1 end
}

}  // namespace penta
