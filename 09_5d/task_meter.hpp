// task_meter.hpp — the addition task's accuracy measured where the logits are: on the pipeline's head stage, as
// the training forward computes them.
//
// Chapter 01's held-out evaluation runs the whole model on one rank; in a 5D layout the layers are spread over
// the pp stages, so there is no rank that could. But every training step reads samples no step has read before
// (data.hpp: sample g of step s is s·G + g), so the forward of a step, before its update, is already a held-out
// test of the weights so far. One difference: these are training problems, and a quarter of them have a
// zero operand (data.hpp says why), so this accuracy reads a little above chapter 01's held-out one.
// TaskMeter is a LossCore (spine.hpp) wrapped around the model's own: it takes the argmax of each row of
// logits before handing them on (the fused cross-entropy overwrites them with their gradient), gathering the
// vocab shards first under tp (chapter 04's gather_vocab_logits), and counts the problems answered exactly
// (data.hpp: addition_accuracy). The step's count is summed over the head stage's ranks.
// Needs whole sequences on a rank, so context parallelism turns it off. Playbook: "5D parallelism".
#pragma once
#include "../common/data.hpp"
#include "../common/grid.hpp"
#include "../common/spine.hpp"

namespace penta {

class TaskMeter : public LossCore {
   public:
    // inner: the model's loss core (kept, called for the loss); tp: the group whose vocab shards the logits are
    // (nullptr: whole); seq: tokens per row
    TaskMeter(LossCore* inner, Comm* tp, int64_t vocab, int64_t seq) : inner_(inner), tp_(tp), vocab_(vocab), seq_(seq) {}
    double forward_backward(const Tensor& logits, const Tensor& targets, Tensor& dlogits, float grad_scale) override;
    // problems counted since the last take (this rank's), and resets
    TaskAccuracy take();
    double gather_bytes() const { return gather_bytes_; }  // what the meter's gathers added to tp's counters

   private:
    LossCore* inner_;
    Comm* tp_;
    int64_t vocab_, seq_;
    TaskAccuracy acc_;
    double gather_bytes_ = 0;
};

// the step's accuracy over the whole global batch: this rank's count summed over the world by the ranks that
// count (tp rank 0 of the head stage; the others pass an empty count). -1 when no problem was counted.
double global_accuracy(Comm& world, const TaskAccuracy& mine);

}  // namespace penta
