// test_main.cpp — the MPI-aware doctest main and the helpers of testing.hpp.
//
// Every rank runs every selected test. A listener records each test case's outcome on each rank; at the
// end the outcomes are reduced over ranks (a test failed if it failed on ANY rank) and rank 0 prints one
// line "N passed, N failed, N skipped". Ranks other than 0 print only failures, prefixed by their rank.
//   mpirun -np 2 build/bin/tests_02 -ts="ch02 np2"
#define DOCTEST_CONFIG_IMPLEMENT
#include "testing.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>

#include "../common/comm.hpp"
#include "../common/runtime.hpp"

namespace penta::testing {

std::vector<float> comm_members(Comm& comm, int world_rank) {
    Tensor me = Tensor::from_host_i32({world_rank}, {1}, Device::cpu);
    Tensor all = Tensor::from_host_i32(std::vector<int32_t>(comm.size(), -1), {comm.size()}, Device::cpu);
    comm.all_gather(me, all);
    return all.to_host();
}

namespace {
struct Outcome {
    std::string name;
    int failed = 0, skipped = 0;
};
std::vector<Outcome> g_outcomes;
std::string g_current, g_skip_reason;
bool g_current_skipped = false;

struct OutcomeListener : doctest::IReporter {
    explicit OutcomeListener(const doctest::ContextOptions&) {}
    void report_query(const doctest::QueryData&) override {}
    void test_run_start() override {}
    void test_run_end(const doctest::TestRunStats&) override {}
    void test_case_start(const doctest::TestCaseData& tc) override {
        g_current = tc.m_name;
        g_current_skipped = false;
    }
    void test_case_reenter(const doctest::TestCaseData&) override {}
    void test_case_end(const doctest::CurrentTestCaseStats& st) override {
        Outcome o{g_current, st.testCaseSuccess ? 0 : 1, g_current_skipped ? 1 : 0};
        if (o.failed && world_rank() != 0)
            std::fprintf(stderr, "[rank %d] FAILED: %s\n", world_rank(), g_current.c_str());
        g_outcomes.push_back(o);
    }
    void test_case_exception(const doctest::TestCaseException&) override {}
    void subcase_start(const doctest::SubcaseSignature&) override {}
    void subcase_end() override {}
    void log_assert(const doctest::AssertData&) override {}
    void log_message(const doctest::MessageData&) override {}
    void test_case_skipped(const doctest::TestCaseData&) override {}
};
}  // namespace

void check_gpu_test_name() {
    CHECK_MESSAGE(g_current.rfind("[gpu] ", 0) == 0,
                  "the GPU test \"" << g_current << "\" must be named \"[gpu] ...\" (scripts/gpu_check.sh selects "
                  "GPU tests by that tag: -tc='[gpu]*')");
}

void mark_skipped(const std::string& reason) {
    g_current_skipped = true;
    if (world_rank() == 0) std::printf("skipped: %s: %s\n", g_current.c_str(), reason.c_str());
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b, double floor) {
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); i++)
        worst = std::max(worst, std::fabs((double)a[i] - b[i]) / std::max(std::fabs((double)b[i]), floor));
    return worst;
}

void check_close(const std::vector<float>& a, const std::vector<float>& b, double rtol, double atol,
                 const std::string& what) {
    REQUIRE_MESSAGE(a.size() == b.size(), what << ": sizes " << a.size() << " vs " << b.size());
    size_t bad = a.size();
    double worst = 0;
    for (size_t i = 0; i < a.size(); i++) {
        double err = std::fabs((double)a[i] - b[i]) - (atol + rtol * std::fabs((double)b[i]));
        if (!(err <= 0) && (bad == a.size() || err > worst || std::isnan(err))) {
            bad = i;
            worst = std::isnan(err) ? INFINITY : err;
        }
    }
    CHECK_MESSAGE(bad == a.size(), what << ": element " << bad << " is " << (bad < a.size() ? a[bad] : 0)
                                        << ", expected " << (bad < a.size() ? b[bad] : 0) << " (rtol " << rtol
                                        << ", atol " << atol << ", n " << a.size() << ")");
}

Tensor random_tensor(const Shape& shape, uint64_t seed, float std, Device device, Tag tag) {
    Tensor t = Tensor::empty(shape, DType::f32, Device::cpu, tag);
    init_normal(t, seed, 12345, std);
    return device == Device::cpu ? t : t.clone(device, tag);
}

Tensor key_range(const Tensor& t, int64_t start, int64_t len) {
    auto h = t.to_host();
    const int64_t B = t.size(0), Tk = t.size(1), row = t.size(2) * t.size(3);
    std::vector<float> part;
    for (int64_t b = 0; b < B; b++)
        part.insert(part.end(), h.begin() + (b * Tk + start) * row, h.begin() + (b * Tk + start + len) * row);
    return Tensor::from_host(part, {B, len, t.size(2), t.size(3)}, Device::cpu);
}

Tensor random_tokens(const Shape& shape, int32_t vocab, uint64_t seed, Device device) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<int32_t> ids(n);
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)(philox4x32(seed, 777, (uint64_t)i).v[0] % (uint32_t)vocab);
    return Tensor::from_host_i32(ids, shape, device);
}

double cross_entropy_reference(const std::vector<float>& z, int64_t V, const std::vector<int32_t>& targets,
                               float grad_scale, std::vector<float>& dz) {
    const int64_t N = (int64_t)targets.size();
    REQUIRE(z.size() == size_t(N * V));
    dz.assign(N * V, 0.0f);
    double total = 0;
    for (int64_t n = 0; n < N; n++) {
        if (targets[n] < 0) continue;
        const float* zr = z.data() + n * V;
        double mx = -INFINITY, s = 0;
        for (int64_t v = 0; v < V; v++) mx = std::max(mx, (double)zr[v]);
        for (int64_t v = 0; v < V; v++) s += std::exp(zr[v] - mx);
        total += mx + std::log(s) - zr[targets[n]];
        for (int64_t v = 0; v < V; v++)
            dz[n * V + v] = (float)(grad_scale * (std::exp(zr[v] - mx) / s - (v == targets[n] ? 1.0 : 0.0)));
    }
    return total;
}

double dot(const Tensor& out, const Tensor& weights) {
    auto a = out.to_host(), b = weights.to_host();
    REQUIRE(a.size() == b.size());
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += (double)a[i] * b[i];
    return s;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void check_gradient(Tensor& x, const std::vector<float>& analytic, const std::function<double()>& loss,
                    const std::string& what, double eps, double rtol, double atol, int max_elems) {
    REQUIRE(x.device() == Device::cpu);
    REQUIRE(x.dtype == DType::f32);
    REQUIRE((int64_t)analytic.size() == x.numel());
    float* p = x.ptr<float>();
    int64_t n = x.numel(), stride = std::max<int64_t>(1, n / max_elems);
    std::vector<float> num, ana;
    for (int64_t i = (n > max_elems ? 7 % stride : 0); i < n; i += stride) {
        float orig = p[i];
        p[i] = orig + (float)eps;
        double up = loss();
        p[i] = orig - (float)eps;
        double down = loss();
        p[i] = orig;
        // divide by the step really taken (orig±eps rounds in f32)
        double h = (double)(orig + (float)eps) - (double)(orig - (float)eps);
        num.push_back((float)((up - down) / h));
        ana.push_back(analytic[i]);
    }
    check_close(ana, num, rtol, atol, what + " (analytic vs finite differences)");
}

}  // namespace penta::testing

REGISTER_LISTENER("penta_outcomes", 1, penta::testing::OutcomeListener);

int main(int argc, char** argv) {
    using namespace penta;
    runtime_init(&argc, &argv);
    doctest::Context ctx;
    ctx.applyCommandLine(argc, argv);
    if (world_rank() != 0) ctx.setOption("minimal", true);
    ctx.setOption("no-intro", true);
    int rc = ctx.run();
    if (ctx.shouldExit()) {
        runtime_finalize();
        return rc;
    }

    auto& outs = testing::g_outcomes;
    std::vector<int> flags(2 * outs.size());
    for (size_t i = 0; i < outs.size(); i++) {
        flags[2 * i] = outs[i].failed;
        flags[2 * i + 1] = outs[i].skipped;
    }
#if defined(PENTA_MPI)
    // all ranks ran the same tests in the same order, so the vectors line up
    int n = (int)flags.size(), nmax = 0;
    MPI_Allreduce(&n, &nmax, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (n != nmax) {
        std::fprintf(stderr, "[rank %d] ran %d tests, another rank %d\n", world_rank(), n / 2, nmax / 2);
        abort_job(1);
    }
    MPI_Allreduce(MPI_IN_PLACE, flags.data(), n, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
#endif
    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < outs.size(); i++) {
        if (flags[2 * i]) {
            failed++;
            if (world_rank() == 0) std::printf("FAILED (on some rank): %s\n", outs[i].name.c_str());
        } else if (flags[2 * i + 1]) {
            skipped++;
        } else {
            passed++;
        }
    }
    if (world_rank() == 0) {
        std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
        std::fflush(stdout);
    }
    runtime_finalize();
    return failed ? 1 : 0;
}
