// testing.hpp — what every pentatron test file shares: doctest, skip reporting, closeness checks, random
// tensors, a finite-difference gradient checker and the message of an expected error.
//
// Tests are grouped in doctest suites named by chapter and world size, e.g. TEST_SUITE("ch00 np1"):
// scripts/run_tests.sh runs "chNN npK" suites under `mpirun -np K`, and `make test CH=NN` picks one chapter.
#pragma once
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../common/ops.hpp"
// Tests use doctest's CHECK/FAIL (a failed check is recorded and the test goes on); the library's
// throwing CHECK/FAIL of core.hpp stay inside the library.
#undef CHECK
#undef FAIL
#include <doctest/doctest.h>

namespace penta {
class Comm;
}

namespace penta::testing {

// the world ranks of comm's members, in comm's rank order (one all_gather of each member's world rank)
std::vector<float> comm_members(Comm& comm, int world_rank);

// A test that cannot run here (no GPU, no PyTorch) calls SKIP_TEST: it is reported as skipped, never as
// passed, and the reason is printed once.
void mark_skipped(const std::string& reason);
#define SKIP_TEST(reason)                           \
    do {                                            \
        ::penta::testing::mark_skipped(reason);     \
        return;                                     \
    } while (0)

// A test that needs a GPU (or a CUDA build) is named "[gpu] ...", a tag that scripts/gpu_check.sh selects
// every GPU test of every test binary by (-tc='[gpu]*'), and starts with SKIP_WITHOUT_GPU(), or with
// SKIP_GPU_TEST(what, why) when it has its own test (chapter 10's gpu_unavailable(): "" when it can run).
// Both check the tag: a GPU test without it fails here, on any machine, instead of being left out there;
// tests/tooling/gpu_cases_test.sh checks the other way round (every tagged test skips without a GPU) and
// that gpu_check.sh's filter selects as many tests as the binaries tag.
void check_gpu_test_name();
#define SKIP_GPU_TEST(what, why)                                                  \
    do {                                                                          \
        ::penta::testing::check_gpu_test_name();                                  \
        const std::string penta_why_not_ = (why);                                 \
        if (!penta_why_not_.empty()) SKIP_TEST(std::string(what) + ": " + penta_why_not_); \
    } while (0)
#define SKIP_WITHOUT_GPU() SKIP_GPU_TEST("GPU test", ::penta::cuda_available() ? "" : "no CUDA device")

// Largest |a-b| / max(|b|, floor) over all elements (b is the reference).
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-3);
// CHECKs same size and every |a-b| <= atol + rtol*|b|; on failure names `what`, the worst index and values.
void check_close(const std::vector<float>& a, const std::vector<float>& b, double rtol, double atol,
                 const std::string& what);

// Tensor with values std * N(0,1) from the counter RNG (seed, stream), so tests are reproducible.
Tensor random_tensor(const Shape& shape, uint64_t seed, float std = 1.0f, Device device = Device::cpu,
                     Tag tag = Tag::workspace);
Tensor random_tokens(const Shape& shape, int32_t vocab, uint64_t seed, Device device = Device::cpu);
// keys [start, start + len) of attention's k or v (B, Tk, nkv, hd), as a new CPU tensor (B, len, nkv, hd): one
// part of a key split, as context parallelism cuts them (tests_00's attention, tests_06's online softmax)
Tensor key_range(const Tensor& t, int64_t start, int64_t len);

// Central finite differences of loss() with respect to the f32 CPU tensor x, compared with `analytic`
// (d loss / d x). Checks up to max_elems elements spread over x. loss() must read x's current contents.
void check_gradient(Tensor& x, const std::vector<float>& analytic, const std::function<double()>& loss,
                    const std::string& what, double eps = 1e-2, double rtol = 2e-2, double atol = 2e-4,
                    int max_elems = 64);

// Cross-entropy in double, the definition: for each row n of z (N, V) with targets[n] >= 0, the loss
// logsumexp(z_n) - z_n[target] summed over rows, and d loss / d z = grad_scale (softmax(z_n) - onehot) into
// dz (N V; 0 on rows with a negative target).
double cross_entropy_reference(const std::vector<float>& z, int64_t V, const std::vector<int32_t>& targets,
                               float grad_scale, std::vector<float>& dz);

// sum(out * weights) in double: the scalar whose gradient w.r.t. out is `weights` (a random projection
// turns any op's output into a loss for gradient checking)
double dot(const Tensor& out, const Tensor& weights);

// The message of the penta::Error that f throws ("" when it throws none), and whether it contains `part`:
// a test of a refusal checks that it happens and that the message names the rule,
//   CHECK(contains(error_of([&] { parse_zero_stage(4); }), "--zero 4"));
std::string error_of(const std::function<void()>& f);
bool contains(const std::string& s, const std::string& part);

// an f32's bit pattern and back (the conversion tests compare codes bit for bit)
inline uint32_t bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}
inline float f32(uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
}

}  // namespace penta::testing
