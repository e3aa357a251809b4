// equivalence.hpp — the two halves of the equivalence test of ARCHITECTURE.md §6 that the data-, ZeRO-, tensor- and
// sequence-parallel tests share (tests/02_data_parallel/test_dp.cpp, tests/03_zero/test_zero.cpp,
// tests/04_tensor_parallel/tp_testing.cpp for test_tp.cpp and test_sp.cpp): the
// single-rank reference run of a global batch, and the comparison of final weights tensor by tensor.
// Kept apart from testing.hpp, which stays free of the model and the training step.
// Run the tests that use it: `make test CH=02` (and CH=03, 04, 05).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../../common/training_step.hpp"
#include "../testing.hpp"

namespace penta::testing {

// What an equivalence test compares: per step the loss and the grad norm before clipping, and the final
// weights in the unsharded flat layout (a parallel run gathers its shards into it).
// The step hooks a precision policy needs beyond the model, for the training runs of these helpers: chapter 11's
// tests set it (their LossScaler for fp16's loss scaling); unset, a policy needs none (fp32, bf16). A function's
// static, so that another file's static initialiser may set it.
using PrecisionHooks = std::function<std::unique_ptr<StepHooks>(const Precision&)>;
PrecisionHooks& precision_hooks();
// precision_hooks' hook for `precision` (nullptr: none), pushed onto t's hooks; keep it while t trains
std::unique_ptr<StepHooks> add_precision_hooks(Trainer& t, const Precision& precision);

struct Trained {
    std::vector<double> losses, norms;
    std::vector<float> params;
    // train_reference's second run, the same training with only the order of the sums changed (see there):
    // how far reordering alone moves each number, which check_same_training holds a parallel run to
    std::vector<double> reordered_losses, reordered_norms;
    std::vector<float> reordered_params;
    std::string reordering;  // how the second run reordered, for messages
    // the dtype the weights are stored in (bf16 / f16 under chapter 11's policies, over f32 master weights): a
    // master weight that reordering moves across a rounding boundary stores one or two quanta of it away
    DType param_dtype = DType::f32;
};

// The single-rank reference: `steps` AdamW steps of `model` on one device, each on the whole global batch
// of `rows` sequences of length `seq` as one micro-batch, step s at lr(s) with the gradient clipped to
// norm `clip`. A layout that splits the same global batch must give the same numbers (ARCHITECTURE.md §6).
// It also trains a copy of `model` from the same weights with the same arithmetic in another order: the
// batch as `rows` micro-batches of one sequence (every weight gradient summed in another order) on the
// other attention kernel (naive <-> flash: the softmax sums and P·V in another order, as ring attention's
// merges do). That run is as right as the first; what separates the two is the spread reordering alone
// produces.
Trained train_reference(Model& model, const AdamWConfig& adamw, const Dataset& data, int64_t seq, int64_t rows,
                        int64_t steps, const std::function<float(int64_t)>& lr, float clip);

// got and ref hold every parameter tensor of cfg in the unsharded flat layout: CHECKs, per tensor, that
// each element is within rtol·|ref| + atol·(the tensor's largest |ref|). The tensor's scale, not the
// element's: sums in another order (split matmuls, ring all-reduces) differ in the last bits, and AdamW
// divides a gradient near zero by its own rounding-sized root mean square, so such an element can move
// by a small fraction of its tensor's scale. Returns the smallest of those scales (0: some tensor of ref
// is all zeros, so comparing it proves nothing).
double check_close_per_tensor(const LlamaConfig& cfg, const std::vector<float>& got, const std::vector<float>& ref,
                              double rtol, double atol, const std::string& what);
// the same over the tensors of `layout` (a model whose cores declare other tensors: a MoE's experts)
double check_close_per_tensor(const ParamLayout& layout, const std::vector<float>& got, const std::vector<float>& ref,
                              double rtol, double atol, const std::string& what);

// The whole comparison of a parallel run with the reference (ref from train_reference), each with its reason:
//   losses and grad norms per step within rtol·|reference|: sums of thousands of terms, which reordering
//     moves by far less — checked here too: ref's own reordered run must be within rtol/10, so the
//     tolerance leaves room for rounding and for nothing much else;
//   final weights, per tensor, each element within kWeightSpread × the largest |reordered - reference| of
//     that tensor (+ 1e-6 of its largest |weight|, for a tensor reordering does not move): AdamW divides
//     each gradient by its own RMS, so a gradient near zero turns its rounding into a step of up to lr, and
//     a correct layout that sums in another order (split matmuls, ring all-reduces) moves such elements
//     as far as the reordered run does, give or take: measured, a correct layout's largest deviation in a
//     tensor is up to 7.4x the reordered run's (cp 2 × tp 2, ring zig-zag, lm_head) and 25x (dp 2 × tp 2 ×
//     pp 2, an o_proj element: 4.7e-7 where reordering moved the tensor by 1.9e-8), hence 40 — still more
//     than three orders of magnitude below a step of lr. A wrong layout (a missing reduction, a stale shard)
//     is off by steps of lr in most elements, and in the losses. Weights stored in bf16 / f16
//     (ref.param_dtype) may also sit one or two quanta of their format from the reference: a master weight that
//     sums in another order lands on the other side of a rounding boundary now and then, and the reordered
//     run, which flips other elements, cannot measure that (its spread in a bf16 / f16 tensor is often 0).
//     Two, not one: with OpenBLAS's AVX-512 kernels fp16 under pp 2 moved one up_proj element's master by
//     more than a quantum in 3 steps (a gradient near zero: AdamW's step of up to lr), 2^-20 at 9.5e-4.
//     Prints the largest |diff| / tolerance seen, the margin left, and the elements one or two quanta apart.
constexpr double kWeightSpread = 40;
void check_same_training(const Trained& got, const Trained& ref, const LlamaConfig& cfg, double rtol,
                         const std::string& what);
void check_same_training(const Trained& got, const Trained& ref, const ParamLayout& layout, double rtol,
                         const std::string& what);

}  // namespace penta::testing
