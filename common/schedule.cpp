// schedule.cpp — the Sequential schedule (schedule.hpp): forward then backward of each micro-batch.
// Playbook: "First steps: training on one GPU" (gradient accumulation). Test: `make test CH=01`.
#include "schedule.hpp"

#include <cmath>

#include "training_step.hpp"

namespace penta {

ScheduleResult Sequential::run(Model& model, std::vector<MicroBatch>& micro_batches, double global_tokens,
                               StepHooks& hooks) {
    ScheduleResult r;
    const Device dev = model.device();
    for (size_t i = 0; i < micro_batches.size(); i++) {
        const MicroBatch& mb = micro_batches[i];
        const int64_t before = kept_activation_bytes(dev);  // on the device, and on the host under offload
        MicroBatchActs acts = model.forward(mb, global_tokens);
        if (i == 0) r.saved_activation_bytes = kept_activation_bytes(dev) - before;
        if (r.first_non_finite < 0 && !std::isfinite(acts.loss)) r.first_non_finite = (int64_t)i;
        r.loss += acts.loss;
        r.aux_loss += acts.aux_loss;
        hooks.before_gradients((int64_t)i, i + 1 == micro_batches.size());
        // gradients accumulate into model.grads() (or the layout's gradient sink)
        model.backward(acts);
    }
    return r;
}

}  // namespace penta
