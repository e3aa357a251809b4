// swiglu.cu — the gated activation of the Llama MLP: out = silu(gate) * up, and its backward.
//
// Playbook: "First steps: training on one GPU" (the MLP of a block) and "GPU kernels": a purely elementwise
// op is memory bound — three reads and two writes per element in backward — so the kernel is one
// grid-stride loop over coalesced elements and nothing more (11_mixed_precision / 10_kernels fuse it with
// neighbours to save those bytes).
// Tested by tests/00_common/test_cuda.cpp (`build/bin/tests_00 -tc='*cuda*swiglu*'` on a machine with a GPU).
#include "cuda_util.cuh"

namespace penta::cuda {

namespace {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void swiglu_forward_kernel(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i];
        out[i] = g * sigmoid(g) * up[i];
    }
}

// d silu(g) / dg = sig(g) * (1 + g * (1 - sig(g)))
__global__ void swiglu_backward_kernel(const float* dout, const float* gate, const float* up, float* dgate,
                                       float* dup, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i], u = up[i], d = dout[i], sg = sigmoid(g);
        dgate[i] = d * u * sg * (1.0f + g * (1.0f - sg));
        dup[i] = d * g * sg;
    }
}

}  // namespace

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) {
    const int64_t n = gate.numel();
    if (n == 0) return;
    swiglu_forward_kernel<<<grid_for(n), kThreads>>>(gate.ptr<float>(), up.ptr<float>(), out.ptr<float>(), n);
    KERNEL_CHECK();
}

void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) {
    const int64_t n = gate.numel();
    if (n == 0) return;
    swiglu_backward_kernel<<<grid_for(n), kThreads>>>(dout.ptr<float>(), gate.ptr<float>(), up.ptr<float>(),
                                                      dgate.ptr<float>(), dup.ptr<float>(), n);
    KERNEL_CHECK();
}

}  // namespace penta::cuda
