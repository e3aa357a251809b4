// test_validate.cpp — chapter 10, the validation harness itself: a result within its bound passes; one wrong
// element, an error above the Frobenius bound, a NaN (an unwritten, poisoned element) each fail; the bound
// of every check is stated; bf16 rounding is the trainer's.
// Playbook: "Diving into the GPUs". Run: build/bin/tests_10 -ts='ch10 np1' -tc='*validation*'
#include <cmath>

#include "../../10_kernels/validate.hpp"
#include "../testing.hpp"

using namespace penta;
using namespace penta::lab;
using namespace penta::testing;

TEST_SUITE("ch10 np1") {
    TEST_CASE("validation: bf16 rounding passes its bound, a wrong element or a NaN does not") {
        const std::vector<float> x = random_normal(4096, 7);
        std::vector<double> ref(x.begin(), x.end());
        std::vector<float> out = round_bf16(x);
        const ErrorReport good = compare(out, ref, Check::gemm_bf16);
        CHECK_MESSAGE(good.ok, good.str());
        CHECK(good.rel_fro > 5e-4);   // bf16 rounding is really there (~1.1e-3 rms)
        CHECK(good.rel_fro < 2e-3);
        // the same rounding is far outside the f32 bound
        CHECK_FALSE(compare(out, ref, Check::gemm_f32).ok);

        std::vector<float> one_bad = out;
        one_bad[1234] += 0.05f;  // 5% of rms: invisible in the Frobenius ratio, caught element-wise
        const ErrorReport bad = compare(one_bad, ref, Check::gemm_bf16);
        CHECK(bad.rel_fro < bound_of(Check::gemm_bf16).rel_fro);
        CHECK_FALSE(bad.ok);
        CHECK(bad.worst_index == 1234);

        std::vector<float> poisoned = out;
        poisoned[17] = NAN;
        const ErrorReport nan = compare(poisoned, ref, Check::gemm_bf16);
        CHECK_FALSE(nan.ok);
        CHECK(nan.nonfinite == 1);
        CHECK(contains(nan.str(), "1 non-finite"));

        std::vector<float> scaled = out;
        for (float& v : scaled) v *= 1.01f;  // 1% everywhere: over the Frobenius bound
        CHECK_FALSE(compare(scaled, ref, Check::gemm_bf16).ok);
    }

    TEST_CASE("validation: every check has a positive bound and a reason; bf16 bits are the trainer's") {
        for (const Bound& b : bounds()) {
            CHECK(b.rel_fro > 0);
            CHECK(b.el_rel > 0);
            CHECK(std::string(b.why).size() > 10);
            CHECK(&bound_of(b.check) == &b);
        }
        const std::vector<float> x = {1.0f, -3.14159f, 1e-20f, 65504.5f};
        const std::vector<uint16_t> bits = to_bf16_bits(x);
        for (size_t i = 0; i < x.size(); i++) CHECK(bits[i] == f32_to_bf16(x[i]));
        CHECK(from_bf16_bits(bits) == round_bf16(x));
        CHECK_FALSE(compare(std::vector<float>{}, std::vector<double>{}, Check::f32_sum).ok);  // nothing compared
    }
}
