// test_blocked_gemm.cpp — chapter 10, the cache-blocked CPU rung on its own: on shapes that cut each of its
// blocks unevenly, every element of C (poisoned with NaN first) is within f32's worst-case rounding bound of
// the fp64 product, gamma_K · sum_k |a_ik b_kj| with gamma_K = K u / (1 - K u), u = 2^-24: what any order of
// K f32 multiply-adds stays within. The bound is computed here, not by validate.hpp's compare, so this grades
// workshop exercise 10.1 (tests/exercises/10_kernels.txt) whatever the state of 10.2 (the error measure).
// Playbook: "Diving into the GPUs" (tiling on the CPU). Run: `make test CH=10`, or
//   build/bin/tests_10 -ts='ch10 np1' -tc='cpu gemm: the blocked rung alone*'
#include <cmath>

#include "../../10_kernels/cpu_gemm.hpp"
#include "../../10_kernels/reference.hpp"
#include "../../10_kernels/validate.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::lab;
using namespace penta::testing;

TEST_SUITE("ch10 np1") {
    TEST_CASE("cpu gemm: the blocked rung alone, every element within f32's rounding bound of the fp64 product") {
        // (M, N, K): one element; no block full; each of C's row block (64), B's columns (512) and B's rows (128)
        // crossed with a tail; a long row of C
        const int64_t shapes[][3] = {{1, 1, 1}, {37, 53, 29}, {67, 517, 261}, {3, 4096 + 40, 20}};
        const double u = std::ldexp(1.0, -24);
        uint64_t seed = 300;
        for (const auto& s : shapes) {
            const int64_t M = s[0], N = s[1], K = s[2];
            CAPTURE(M);
            CAPTURE(N);
            CAPTURE(K);
            const std::vector<float> A = random_normal(M * K, seed++), B = random_normal(K * N, seed++);
            std::vector<float> C((size_t)(M * N), NAN);
            sgemm_cpu(CpuRung::blocked, M, N, K, A.data(), B.data(), C.data());
            const std::vector<double> ref = gemm_ref(A.data(), B.data(), M, N, K, false);
            const double gamma = K * u / (1 - K * u);
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double mag = 0;  // sum_k |a_ik b_kj|
                    for (int64_t k = 0; k < K; k++) mag += std::fabs((double)A[i * K + k] * B[k * N + j]);
                    const int64_t e = i * N + j;
                    if (!(std::fabs(C[e] - ref[e]) <= gamma * mag)) bad++, first = first < 0 ? e : first;  // NaN: unwritten
                }
            CHECK_MESSAGE(bad == 0, bad << " elements outside the bound; the first, C[" << first / N << "][" << first % N
                                        << "] = " << (first >= 0 ? C[first] : 0.0f) << ", fp64 " << (first >= 0 ? ref[first] : 0.0));
        }
    }
}
