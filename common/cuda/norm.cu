// norm.cu — the per-token ops around the transformer blocks: token embedding, RMSNorm and rotary position
// embedding (RoPE), forward and backward.
//
// Playbook: "First steps: training on one GPU" (the ops of a Llama step) and "GPU kernels": row-wise ops
// get one thread block per row, so a row's reduction stays inside one block (shared memory + shuffles)
// and its threads read the row with coalesced, stride-1 accesses.
// Parameter gradients are ACCUMULATED (ops.hpp):
// - embedding_backward scatters rows with atomicAdd: repeated tokens hit the same row, and float atomics
//   make the order of those few additions vary from run to run (the usual trade-off, as in PyTorch);
// - rmsnorm's dw is a sum over all rows, done deterministically: blocks of columns × groups of rows write
//   partial sums, then a second kernel adds the groups in a fixed order.
// Tested by tests/00_common/test_cuda.cpp (`build/bin/tests_00 -tc='*cuda*'` on a machine with a GPU).
#include <cmath>
#include <vector>

#include "cuda_util.cuh"

namespace penta::cuda {

namespace {

constexpr int kRowGroups = 64;  // rmsnorm dw: rows are split into this many groups of partial sums

// ---- embedding ----------------------------------------------------------------------------------------
__global__ void embedding_forward_kernel(const int32_t* tokens, const float* table, float* out, int64_t V,
                                         int64_t h, int64_t vocab_start) {
    const int64_t row = blockIdx.x, t = (int64_t)tokens[row] - vocab_start;
    const bool mine = t >= 0 && t < V;  // tokens of another vocab shard give zero rows
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) out[row * h + c] = mine ? table[t * h + c] : 0.0f;
}

__global__ void embedding_backward_kernel(const int32_t* tokens, const float* dout, float* dtable, int64_t V,
                                          int64_t h, int64_t vocab_start) {
    const int64_t row = blockIdx.x, t = (int64_t)tokens[row] - vocab_start;
    if (t < 0 || t >= V) return;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) atomicAdd(&dtable[t * h + c], dout[row * h + c]);
}

// ---- RMSNorm ------------------------------------------------------------------------------------------
__global__ void rmsnorm_forward_kernel(const float* x, const float* w, float* y, float* rstd, int64_t h, float eps) {
    const float* xr = x + blockIdx.x * h;
    double ss = 0;  // double, as the CPU reference: h reaches thousands of terms
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) ss += (double)xr[c] * xr[c];
    ss = block_reduce(ss, SumOp{}, 0.0);
    const float r = (float)(1.0 / sqrt(ss / (double)h + eps));
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) y[blockIdx.x * h + c] = xr[c] * r * w[c];
}

// dx = r * (w*dy - x * r^2 * mean(w*dy*x)): the second term is the gradient through r = rms(x)^-1
__global__ void rmsnorm_backward_dx_kernel(const float* dy, const float* x, const float* w, const float* rstd,
                                           float* dx, int64_t h) {
    const int64_t off = blockIdx.x * h;
    const float r = rstd[blockIdx.x];
    double dot = 0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) dot += (double)dy[off + c] * w[c] * x[off + c];
    dot = block_reduce(dot, SumOp{}, 0.0);
    const float k = (float)(dot * r * r / (double)h);
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) dx[off + c] = r * (w[c] * dy[off + c] - x[off + c] * k);
}

// partial[g][c] = sum over rows n ≡ g (mod groups) of dy[n][c] * x[n][c] * rstd[n]; grid (column blocks,
// groups): consecutive threads take consecutive columns, so each row is read coalesced
__global__ void rmsnorm_dw_partial_kernel(const float* dy, const float* x, const float* rstd, float* partial,
                                          int64_t N, int64_t h) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= h) return;
    float acc = 0;
    for (int64_t n = blockIdx.y; n < N; n += gridDim.y) acc += dy[n * h + c] * x[n * h + c] * rstd[n];
    partial[blockIdx.y * h + c] = acc;
}

__global__ void rmsnorm_dw_sum_kernel(const float* partial, float* dw, int groups, int64_t h) {
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= h) return;
    float acc = 0;
    for (int g = 0; g < groups; g++) acc += partial[g * h + c];
    dw[c] += acc;
}

// ---- RoPE ---------------------------------------------------------------------------------------------
// One thread per rotated pair (i, i + hd/2). sign = +1 rotates by +angle (forward), -1 by -angle (the
// backward: a rotation's transpose is its inverse). Both elements are read before either is written, so
// out may alias x.
__global__ void rope_kernel(const float* x, const int32_t* pos, const float* inv_freq, float* out, int64_t T,
                            int64_t nh, int64_t hd, float sign, int64_t pairs) {
    const int64_t half = hd / 2;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < pairs; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e % half, row = e / half, t = (row / nh) % T;  // row = (b*T + t)*nh + head
        const float angle = (float)pos[t] * inv_freq[i];
        const float c = cosf(angle), s = sign * sinf(angle);
        const int64_t a = row * hd + i;
        const float x1 = x[a], x2 = x[a + half];
        out[a] = x1 * c - x2 * s;
        out[a + half] = x2 * c + x1 * s;
    }
}

// inv_freq (hd/2): the model's table, made once on the device (rope.hpp), so both backends rotate by the
// same angles and no call copies anything from the host
void rope(const Tensor& x, const Tensor& pos, const Tensor& inv_freq, Tensor& out, float sign) {
    const int64_t T = x.size(1), nh = x.size(2), hd = x.size(3), pairs = x.numel() / 2;
    if (pairs == 0) return;
    rope_kernel<<<grid_for(pairs), kThreads>>>(x.ptr<float>(), pos.ptr<int32_t>(), inv_freq.ptr<float>(),
                                               out.ptr<float>(), T, nh, hd, sign, pairs);
    KERNEL_CHECK();
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out, int64_t vocab_start) {
    const int64_t N = out.size(0), h = out.size(1);
    if (N == 0) return;
    embedding_forward_kernel<<<(unsigned)N, kThreads>>>(tokens.ptr<int32_t>(), table.ptr<float>(),
                                                        out.ptr<float>(), table.size(0), h, vocab_start);
    KERNEL_CHECK();
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable, int64_t vocab_start) {
    const int64_t N = dout.size(0), h = dout.size(1);
    if (N == 0) return;
    embedding_backward_kernel<<<(unsigned)N, kThreads>>>(tokens.ptr<int32_t>(), dout.ptr<float>(),
                                                         dtable.ptr<float>(), dtable.size(0), h, vocab_start);
    KERNEL_CHECK();
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd, float eps) {
    const int64_t N = x.size(0), h = x.size(1);
    if (N == 0) return;
    rmsnorm_forward_kernel<<<(unsigned)N, kThreads>>>(x.ptr<float>(), w.ptr<float>(), y.ptr<float>(),
                                                      rstd.ptr<float>(), h, eps);
    KERNEL_CHECK();
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw) {
    const int64_t N = x.size(0), h = x.size(1);
    if (N == 0 || h == 0) return;
    if (dx.defined()) {  // B: the input gradient (reads w)
        rmsnorm_backward_dx_kernel<<<(unsigned)N, kThreads>>>(dy.ptr<float>(), x.ptr<float>(), w.ptr<float>(),
                                                              rstd.ptr<float>(), dx.ptr<float>(), h);
        KERNEL_CHECK();
    }
    if (!dw.defined()) return;
    // W: the weight gradient (reads no weight)
    const int groups = (int)std::min<int64_t>(N, kRowGroups);
    Tensor partial = workspace(groups * h * sizeof(float));  // (groups, h)
    const dim3 grid((unsigned)((h + kThreads - 1) / kThreads), groups);
    rmsnorm_dw_partial_kernel<<<grid, kThreads>>>(dy.ptr<float>(), x.ptr<float>(), rstd.ptr<float>(),
                                                  partial.ptr<float>(), N, h);
    KERNEL_CHECK();
    rmsnorm_dw_sum_kernel<<<grid.x, kThreads>>>(partial.ptr<float>(), dw.ptr<float>(), groups, h);
    KERNEL_CHECK();
}

void rope_forward(const Tensor& x, const Tensor& pos, const Tensor& inv_freq, Tensor& out) {
    rope(x, pos, inv_freq, out, 1.0f);
}

void rope_backward(const Tensor& dout, const Tensor& pos, const Tensor& inv_freq, Tensor& dx) {
    rope(dout, pos, inv_freq, dx, -1.0f);
}

}  // namespace penta::cuda
