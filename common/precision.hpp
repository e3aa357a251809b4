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
//   tf32          f32 matmuls may run on TF32 tensor cores (inputs rounded to 10 mantissa bits, sums in
//                 f32: ~8x the plain fp32 rate on an A100/H100, errors near 1e-3 instead of 1e-6). GPU
//                 only (the CPU computes in f32 whatever it says); off by default, --tf32 turns it on.
// The default is all fp32 without a master copy: chapters 01-05 as they were, bit for bit.
//
// Playbook: "Mixed precision training" (bf16 weights with fp32 master weights and optimizer states: the
// 2Ψ + 2Ψ + 12Ψ of the memory tables). Chapter 11 adds bf16/fp16/fp8 compute and loss scaling; until then
// the CPU ops compute in fp32, so act, grad and comm must be f32 (validate says so).
// Test: `make test CH=01` (the bf16-parameter smoke test in tests/01_single_gpu/test_precision.cpp).
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

    // bf16 weights (half the bytes, also for ZeRO-3's gathers), fp32 master weights, fp32 gradients and
    // compute: the policy of the playbook's mixed-precision memory table, minus bf16 compute
    static Precision bf16_params() { return Precision{DType::bf16, DType::f32, DType::f32, DType::f32, true}; }
    std::string str() const;  // "param bf16, grad f32, act f32, comm f32, fp32 master, tf32"
    // throws naming the field and the rule when a combination is not supported (yet)
    void validate() const;
};

}  // namespace penta
