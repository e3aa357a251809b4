// optimizer.cu — the AdamW update and the sum of squares behind global gradient-norm clipping.
//
// Playbook: "Memory usage in Transformers" (AdamW keeps two fp32 moments per parameter: the 2·4Ψ bytes of
// optimizer state) and the training-step chapter (clip by the global norm, then step).
// sum_squares is a deterministic two-pass reduction: a fixed number of blocks (a function of n only) each
// write one partial sum, then one block adds the partials in a fixed order, all in double; over a list of
// tensors (AdamW's global norm) every tensor's partials go into one buffer, added by one kernel. Atomics would
// add in whatever order blocks finish, and the grad norm — hence the clipped step — would change from run
// to run.
// Tested by tests/00_common/test_cuda.cpp (`build/bin/tests_00 -tc='*cuda*'` on a machine with a GPU).
#include <cmath>

#include "cuda_util.cuh"

namespace penta::cuda {

namespace {

constexpr int kMaxPartials = 1024;

// PyTorch's AdamW term for term (as the CPU reference): decoupled decay, then the bias-corrected step
// p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
__global__ void adamw_kernel(float* p, const float* grad, float* m, float* v, int64_t n, AdamWConfig cfg,
                             float decay, float step_size, float bias2_sqrt, float grad_scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = grad[i] * grad_scale;
        const float mi = cfg.beta1 * m[i] + (1.0f - cfg.beta1) * g;
        const float vi = cfg.beta2 * v[i] + (1.0f - cfg.beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) / bias2_sqrt + cfg.eps);
    }
}

__global__ void sum_squares_partial_kernel(const float* x, int64_t n, double* partial) {
    double acc = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc += (double)x[i] * x[i];
    acc = block_reduce(acc, SumOp{}, 0.0);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// one block: out[0] = sum of v[0..n), in an order fixed by n and the block size
__global__ void sum_doubles_kernel(const double* v, int64_t n, double* out) {
    double acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += v[i];
    acc = block_reduce(acc, SumOp{}, 0.0);
    if (threadIdx.x == 0) out[0] = acc;
}

}  // namespace

void sum_doubles(const double* v, int64_t n, double* out) {
    sum_doubles_kernel<<<1, kThreads>>>(v, n, out);
    KERNEL_CHECK();
}

double sum_doubles_to_host(const double* v, int64_t n) {
    Tensor ws = workspace(sizeof(double));
    double* out = (double*)ws.data();
    sum_doubles(v, n, out);
    double result = 0;
    copy_to_host(&result, out, sizeof(double));
    return result;
}

namespace {
int partial_blocks(int64_t n) { return std::min(grid_for(n), kMaxPartials); }
}  // namespace

double sum_squares(const Tensor& x) { return cuda::sum_squares(std::vector<Tensor>{x}); }

// One partial-sum kernel per tensor into one buffer of partials, one kernel adding them all, one copy:
// the global grad norm costs the step a single wait however many tensors it covers.
double sum_squares(const std::vector<Tensor>& xs) {
    int64_t total = 0;
    for (const Tensor& x : xs) total += x.numel() ? partial_blocks(x.numel()) : 0;
    if (total == 0) return 0.0;
    Tensor ws = workspace(total * sizeof(double));
    double* partial = (double*)ws.data();
    int64_t at = 0;
    for (const Tensor& x : xs) {
        const int64_t n = x.numel();
        if (n == 0) continue;
        const int blocks = partial_blocks(n);
        sum_squares_partial_kernel<<<blocks, kThreads>>>(x.ptr<float>(), n, partial + at);
        KERNEL_CHECK();
        at += blocks;
    }
    return sum_doubles_to_host(partial, total);
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& cfg, int step,
                float grad_scale) {
    const int64_t n = param.numel();
    if (n == 0) return;
    const AdamWScalars k = adamw_scalars(cfg, step);  // bias corrections 1 - beta^step, once on the host
    adamw_kernel<<<grid_for(n), kThreads>>>(param.ptr<float>(), grad.ptr<float>(), m.ptr<float>(), v.ptr<float>(),
                                            n, cfg, k.decay, k.step_size, k.bc2_sqrt, grad_scale);
    KERNEL_CHECK();
}

}  // namespace penta::cuda
