// task_meter.cpp — accuracy from the training forward's logits (task_meter.hpp).
//   mpirun -np 8 build/bin/09_5d --dp 2 --tp 2 --pp 2   (the "acc" column)
#include "task_meter.hpp"

#include "../04_tensor_parallel/vocab_parallel.hpp"

namespace penta {

double TaskMeter::forward_backward(const Tensor& logits, const Tensor& targets, Tensor& dlogits, float grad_scale) {
    // (rows, V) or this rank's vocab shard (rows, V/tp): every tp rank calls the gather together
    const double before = tp_ ? tp_->counters().total_bytes() : 0;
    const Tensor whole = tp_ && tp_->size() > 1 ? gather_vocab_logits(*tp_, logits, vocab_) : logits;
    if (tp_) gather_bytes_ += tp_->counters().total_bytes() - before;
    const int64_t rows = whole.size(0);
    if (rows % seq_ == 0 && (!tp_ || tp_->rank() == 0)) {
        const std::vector<int32_t> pred = argmax_rows(whole.to_host().data(), rows, whole.size(-1));
        const std::vector<int32_t> tgt = targets.to_host_i32();
        const TaskAccuracy a = addition_accuracy(pred.data(), tgt.data(), rows / seq_, seq_);
        acc_.correct += a.correct, acc_.total += a.total;
    }
    return inner_->forward_backward(logits, targets, dlogits, grad_scale);
}

TaskAccuracy TaskMeter::take() {
    const TaskAccuracy a = acc_;
    acc_ = {};
    return a;
}

double global_accuracy(Comm& world, const TaskAccuracy& mine) {
    const double correct = world.all_reduce_scalar((double)mine.correct);
    const double total = world.all_reduce_scalar((double)mine.total);
    return total > 0 ? correct / total : -1;
}

}  // namespace penta
