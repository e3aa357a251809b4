// precision.hpp — the precision policy: in which dtype each kind of tensor lives, passed through the model,
// the optimizer and the communication, so no chapter names a dtype for a tensor the policy decides.
//
//   param   the weights as stored (and as ZeRO-3 gathers them)
//   grad    the gradients as backward accumulates them
//   act     the activations, and the dtype the matmuls compute in (weights of another dtype are converted
//           to it unit by unit when the model acquires them)
//   comm    the dtype gradients are reduced in (data parallelism, ZeRO); the reductions use the gradients'
//           dtype, so until chapter 11 adds conversion around them it must equal `grad` (validate says so)
//   fp32_master   the optimizer keeps an fp32 copy of the weights it updates (Tag::master), steps that copy
//                 and writes it back rounded to `param`: small updates are not lost to bf16's 8-bit mantissa
//   gemm          the format the linear layers' GEMMs read their inputs in (chapter 11): f32; bf16 or f16 (each
//                 input rounded to it, products summed in f32); e4m3 = fp8 (forward inputs e4m3, the gradient
//                 operand of the backward GEMMs e5m2, each scaled per tile along K: 1x128 for activations and
//                 gradients, 128x128 for weights, partial sums promoted to f32 every 128 elements of K;
//                 linear_gemm.hpp; fp8 is chapter 11's, 11_mixed_precision/fp8.hpp). The CPU emulates every format
//                 exactly, a GPU runs them through cuBLASLt (fp8 on Hopper); activations, gradients and the other
//                 ops stay f32 on both.
//   loss_scaling  fp16's dynamic loss scale (chapter 11's 11_mixed_precision/loss_scaler.hpp): the loss gradient
//                 is multiplied by S so small gradients survive f16's range, the step is skipped and S halved
//                 when one overflows
//   tf32          f32 matmuls may run on TF32 tensor cores (inputs rounded to 10 mantissa bits, sums in
//                 f32: ~8x the plain fp32 rate on an A100/H100, errors near 1e-3 instead of 1e-6). GPU
//                 only (the CPU computes in f32 whatever it says); off by default, --tf32 turns it on.
// The default is all fp32 without a master copy: chapters 01-05 as they were, bit for bit.
//
// Playbook: "Mixed precision training" (bf16 weights with fp32 master weights and optimizer states: the
// 2Ψ + 2Ψ + 12Ψ of the memory tables; fp16 loss scaling; FP8 with fine-grained scales). Chapter 11's
// --precision fp32|bf16|fp16|fp8 names the four policies (Precision::named); only the GEMMs' inputs go low
// (emulated on the CPU, cuBLASLt on a GPU), so act, grad and comm stay f32 (validate says so). Chapters 01-09
// train in fp32 or bf16: fp16 needs chapter 11's loss scaler, fp8 its GEMM (TrainConfig::precisions).
// Test: `make test CH=01` (bf16 weights), `make test CH=11` (the four policies).
#pragma once
#include <string>

#include "tensor.hpp"

namespace penta {

struct Precision {
    DType param = DType::f32;
    DType grad = DType::f32;
    DType act = DType::f32;
    DType comm = DType::f32;
    bool fp32_master = false;
    bool tf32 = false;
    DType gemm = DType::f32;
    bool loss_scaling = false;

    // bf16 weights (half the bytes, also for ZeRO-3's gathers), fp32 master weights, fp32 gradients and
    // compute: the policy of the playbook's mixed-precision memory table, minus bf16 compute
    static Precision bf16_params() { return Precision{DType::bf16, DType::f32, DType::f32, DType::f32, true}; }
    // --precision NAME: fp32 (the default above); bf16 = bf16 weights and GEMMs, fp32 master and gradients;
    // fp16 = the same in f16 with dynamic loss scaling; fp8 = bf16 weights, fp8 GEMMs with tile scales.
    // Throws naming the flag for any other name.
    static Precision named(const std::string& name);
    std::string str() const;  // "param bf16, grad f32, act f32, comm f32, fp32 master, gemm bf16, loss scaling"
    // throws naming the field and the rule when a combination is not supported (yet)
    void validate() const;
};

}  // namespace penta
