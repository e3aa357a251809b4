// sequence_parallel.cpp — the SP boundary, the norm-gradient sum and the norm-region activation count
// (sequence_parallel.hpp).
// Test: `mpirun -np 2 build/bin/tests_05 -ts='ch05 np2'`.
#include "sequence_parallel.hpp"


namespace penta {

namespace {

// rows of x split over the group: this rank's contiguous block of N/t token rows
int64_t local_rows(const Comm& tp, int64_t N) {
    CHECK(N % tp.size() == 0,
          "sequence parallelism splits the %lld tokens of a micro-batch (--micro-batch × --seq) into --tp %d equal "
          "blocks: the token count must be divisible by --tp",
          (long long)N, tp.size());
    return N / tp.size();
}

}  // namespace

TensorParallelSeams install_tensor_parallel(Model& model, Comm& tp, bool sp) {
    if (tp.size() == 1) return {};
    return install_tensor_parallel(model, tp, sp ? std::make_unique<SequenceParallel>(tp) : nullptr);
}

// Outputs inherit the input's allocation tag: the gathered input of q/k/v is what the layer saves for
// backward (Tag::activations in training), the scattered embedding output is the first layer's input.

Tensor SequenceParallel::f(const Tensor& x) {
    // EXERCISE 05.1 begin: entering the tp region: all-gather the sequence-split activations forward, reduce-scatter their gradient backward
    const double before = tp_.counters().total_bytes();
    Tensor full = Tensor::empty({x.size(0) * tp_.size(), x.size(1)}, x.dtype, x.device(), x.tag());  // (N, h)
    tp_.all_gather(x, full);  // every rank's (N/t, h) block, in token order
    tally(true, before);
    return full;
    // EXERCISE 05.1 end
}

Tensor SequenceParallel::f_backward(const Tensor& dx) {
    // EXERCISE 05.1 begin: entering the tp region, backward: reduce-scatter d x to this rank's tokens
    const double before = tp_.counters().total_bytes();
    Tensor mine = Tensor::empty({local_rows(tp_, dx.size(0)), dx.size(1)}, dx.dtype, dx.device(), dx.tag());
    tp_.reduce_scatter(dx, mine);  // (N/t, h): every rank's heads' share of d x, for this rank's tokens only
    tally(false, before);
    return mine;
    // EXERCISE 05.1 end
}

Tensor SequenceParallel::g(const Tensor& y) {
    // EXERCISE 05.2 begin: leaving the tp region: reduce-scatter the partial products to this rank's tokens forward
    const double before = tp_.counters().total_bytes();
    Tensor mine = Tensor::empty({local_rows(tp_, y.size(0)), y.size(1)}, y.dtype, y.device(), y.tag());
    tp_.reduce_scatter(y, mine);  // (N/t, h): the partial products summed, kept only for this rank's tokens
    tally(true, before);
    return mine;
    // EXERCISE 05.2 end
}

Tensor SequenceParallel::g_backward(const Tensor& dy) {
    // EXERCISE 05.2 begin: leaving the tp region, backward: all-gather d y over every token
    const double before = tp_.counters().total_bytes();
    Tensor full = Tensor::empty({dy.size(0) * tp_.size(), dy.size(1)}, dy.dtype, dy.device(), dy.tag());
    tp_.all_gather(dy, full);  // (N, h): the row-parallel linear's backward needs d y for every token
    tally(false, before);
    return full;
    // EXERCISE 05.2 end
}

void SequenceParallel::sum_token_split_grad(Tensor& partial) {
    const double before = tp_.counters().total_bytes();
    tp_.all_reduce(partial);  // (h): every rank's tokens' share of a norm weight's gradient
    norm_grad_bytes_ += tp_.counters().total_bytes() - before;
}

int64_t norm_region_activation_bytes(const MicroBatchActs& acts) {
    int64_t bytes = 0;
    for (const LayerActs& a : acts.layers)
        for (const Tensor* t : {&a.x_in, &a.attn_rstd, &a.x_mid, &a.mlp_rstd}) {
            if (!t->defined()) continue;  // full recomputation keeps x_in only
            // activations, on the device or parked on the host (--recompute offload)
            CHECK(t->tag() == Tag::activations || t->tag() == Tag::offloaded,
                  "norm-region tensor of %s held as %s, not activations",
                  shape_str(t->shape).c_str(), tag_name(t->tag()));
            bytes += (int64_t)t->nbytes();
        }
    return bytes;
}

}  // namespace penta
