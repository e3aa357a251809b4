// cross_entropy.cu — fused softmax + cross-entropy over the vocabulary, forward and backward in one pass
// over the logits.
//
// Playbook: "First steps: training on one GPU" (the loss) and "GPU kernels" / "Flash attention": the
// online softmax. One block per row; each thread walks its strided share of the vocabulary keeping a
// running (max, sum of exp(x - max)) — when a larger value arrives the sum is rescaled — and the block
// merges the threads' pairs. That needs one read of the row for the log-sum-exp instead of two, and the
// (N, V) probabilities are never stored: the gradient (softmax - onehot) * grad_scale is written straight
// into dlogits, which may be the logits buffer itself.
// The per-row losses are summed in double by one block in a fixed order, so the loss is deterministic;
// the sum and the bad-target flag come back in one device -> host copy, the call's only wait.
// Tested by tests/00_common/test_cuda.cpp (`build/bin/tests_00 -tc='*cuda*cross*'` on a machine with a GPU).
#include <climits>

#include "cuda_util.cuh"

namespace penta::cuda {

// A partial softmax denominator: sum of exp(x - m) over the values seen, m their maximum.
struct MaxSum {
    float m, s;
};

__device__ __forceinline__ MaxSum shfl_xor(MaxSum v, int lane_mask) {
    return MaxSum{__shfl_xor_sync(kFullMask, v.m, lane_mask), __shfl_xor_sync(kFullMask, v.s, lane_mask)};
}

namespace {

struct MergeMaxSum {
    __device__ MaxSum operator()(MaxSum a, MaxSum b) const {
        const float m = fmaxf(a.m, b.m);
        if (m == -INFINITY) return MaxSum{m, 0.0f};  // both empty
        return MaxSum{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
    }
};

__global__ void cross_entropy_kernel(const float* logits, const int32_t* targets, float* dlogits, float* losses,
                                     double* row_loss, int* first_bad_row, int64_t V, float grad_scale,
                                     int32_t ignore_index) {
    const int64_t row = blockIdx.x;
    const float* x = logits + row * V;
    float* dx = dlogits ? dlogits + row * V : nullptr;
    const int32_t target = targets[row];
    // the same answer for every thread of the block, so the early return below keeps the block together
    if (target == ignore_index || target < 0 || target >= V) {
        if (target != ignore_index && threadIdx.x == 0) atomicMin(first_bad_row, (int)row);
        if (dx)
            for (int64_t c = threadIdx.x; c < V; c += blockDim.x) dx[c] = 0.0f;
        if (threadIdx.x == 0) {
            if (losses) losses[row] = 0.0f;
            row_loss[row] = 0.0;
        }
        return;
    }
    // read before block_reduce's barrier: after it, other threads may overwrite the row (dlogits == logits)
    const float x_target = x[target];
    MaxSum acc{-INFINITY, 0.0f};
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
        const float v = x[c];
        if (v > acc.m) {
            acc.s = acc.s * expf(acc.m - v) + 1.0f;
            acc.m = v;
        } else {
            acc.s += expf(v - acc.m);
        }
    }
    acc = block_reduce(acc, MergeMaxSum{}, MaxSum{-INFINITY, 0.0f});
    const float lse = acc.m + logf(acc.s);
    if (dx)
        for (int64_t c = threadIdx.x; c < V; c += blockDim.x)
            dx[c] = (expf(x[c] - lse) - (c == target ? 1.0f : 0.0f)) * grad_scale;
    if (threadIdx.x == 0) {
        if (losses) losses[row] = lse - x_target;
        row_loss[row] = (double)lse - (double)x_target;
    }
}

}  // namespace

double cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, Tensor& dlogits,
                                      float grad_scale, int32_t ignore_index, Tensor& losses) {
    const int64_t N = logits.size(0), V = logits.size(1);
    if (N == 0) return 0.0;
    constexpr int kNoBadRow = 0x7f7f7f7f;  // what a memset of 0x7f bytes writes: above every row index
    CHECK(N < kNoBadRow, "cross_entropy: %ld rows exceed the kernel's int row index", (long)N);
    // per-row losses (N doubles), then what the host reads: the sum and the first bad row, in ONE copy
    Tensor ws = workspace((N + 2) * sizeof(double));
    double* row_loss = (double*)ws.data();
    struct Result {
        double sum;
        int first_bad_row, pad;
    };
    Result* result = (Result*)(row_loss + N);
    CUDA_CHECK(cudaMemsetAsync(&result->first_bad_row, 0x7f, sizeof(int), 0));
    cross_entropy_kernel<<<(unsigned)N, kThreads>>>(logits.ptr<float>(), targets.ptr<int32_t>(),
                                                    dlogits.defined() ? dlogits.ptr<float>() : nullptr,
                                                    losses.defined() ? losses.ptr<float>() : nullptr, row_loss,
                                                    &result->first_bad_row, V, grad_scale, ignore_index);
    KERNEL_CHECK();
    sum_doubles(row_loss, N, &result->sum);
    Result r;
    copy_to_host(&r, result, sizeof r);  // the step's one wait for the loss: the value the log prints
    CHECK(r.first_bad_row >= N, "cross_entropy: target of row %d is outside [0, %ld) and is not ignore_index %d",
          r.first_bad_row, (long)V, ignore_index);
    return r.sum;
}

}  // namespace penta::cuda
