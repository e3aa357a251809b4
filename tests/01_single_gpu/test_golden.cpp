// test_golden.cpp — chapter 01 against PyTorch's values without PyTorch: a fresh dump of each case of
// reference_testing.hpp compared with tests/01_single_gpu/golden/<case>.json, which tools/torch_reference.py
// wrote from its float64 PyTorch model on the same weights and batch (and only after the whole comparison
// agreed). This is what catches a wrong model on a machine without PyTorch: a RoPE that rotates the wrong
// way, epsilon outside RMSNorm's square root, a mask that shows a query the next token, weight decay on the
// norms (the mutation harness, tests/mutants/, checks that it does).
//
// What is compared, at the tolerances of the full comparison in torch_reference.py (so this passes
// wherever that would, on the values kept):
//   the inputs       tokens and targets exactly, the initial weights' sum of squares to 1e-9: if they differ
//                    the test itself changed (setup, dataset, initialisation) and the file must be remade
//   loss             1e-5 relative; the first step's loss the same, the later ones 1e-4 (after an update Adam's
//                    tilt of near-zero gradients moves them: `far` at step 5 measures 1.4e-5 with OpenBLAS's
//                    AVX-512 sgemm, 7.8e-6 with its AVX2 one)
//   logits           64 strided samples within 1e-4·|ref| + 1e-5; per token row its loss (logsumexp minus
//                    the target's logit) to 1e-5 relative and its sum of squares; the whole sum of squares
//   each gradient    64 samples within 1e-3·|ref| + 1e-6·max|ref| (1e-5 for `far`, whose peaked attention
//                    rounds more: torch_reference.py); its sum of squares and max |g|
//   each weight      after 5 AdamW steps: 64 samples within 1e-4·|ref| + 0.05·lr (torch_reference.py says
//                    why a twentieth of a step); its sum of squares
// A sum of squares is held to what the elementwise tolerance implies for it (sum_squares_tolerance).
//
// Regenerate the files (after a deliberate change of the setup or of initialisation; needs PyTorch):
//   PENTA_WRITE_GOLDEN=1 build/bin/tests_01 -ts='ch01 np1' -tc='*golden*'
// Run: `make test CH=01`, or build/bin/tests_01 -ts='ch01 np1' -tc='*golden*'.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "reference_testing.hpp"

using namespace penta;
using namespace penta::testing;
using nlohmann::json;

namespace {

const std::string kGoldenDir = PENTA_SOURCE_DIR "/tests/01_single_gpu/golden";

template <class T>
std::vector<T> read_bin(const std::string& path) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    REQUIRE_MESSAGE(f.good(), "cannot read " << path);
    const std::streamsize n = f.tellg();
    std::vector<T> v(n / sizeof(T));
    f.seekg(0);
    f.read((char*)v.data(), n);
    return v;
}

json read_json(const std::string& path) {
    std::ifstream f(path);
    REQUIRE_MESSAGE(f.good(), "cannot read " << path);
    return json::parse(f);
}

// If every element obeys |a_i - b_i| <= atol + rtol |b_i|, then |sum a^2 - sum b^2| <= sum |a_i - b_i| |a_i + b_i|
// <= (2 rtol + rtol^2) sum b^2 + 2 (1 + rtol) atol sum |b_i| + n atol^2, and sum |b_i| <= sqrt(n sum b^2).
double sum_squares_tolerance(double ss, int64_t n, double rtol, double atol) {
    return (2 * rtol + rtol * rtol) * ss + 2 * (1 + rtol) * atol * std::sqrt((double)n * ss) + (double)n * atol * atol;
}

double sum_squares(const float* x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

// the largest |diff| / tolerance seen per kind of value in the current case, printed as the margin left
std::map<std::string, double> g_margin;
void note_margin(const std::string& kind, double diff, double tol) {
    double& m = g_margin[kind];
    m = std::max(m, tol > 0 ? diff / tol : (diff > 0 ? INFINITY : 0.0));
}
std::string kind_of(const std::string& what) {
    for (const char* k : {"gradient", "after", "token row", "logits", "loss of step", "loss"})
        if (what.find(k) != std::string::npos) return k == std::string("after") ? "weights" : k;
    return what;
}

void check_scalar(double ours, double ref, double tol, const std::string& what) {
    note_margin(kind_of(what), std::fabs(ours - ref), tol);
    CHECK_MESSAGE(std::fabs(ours - ref) <= tol,
                  what << ": ours " << ours << ", PyTorch " << ref << " (|diff| " << std::fabs(ours - ref)
                       << " > tolerance " << tol << ")");
}

// ours: the whole tensor (n values); g: its golden entry {index, value, sum_squares[, max_abs]}
void check_tensor(const float* ours, int64_t n, const json& g, double rtol, double atol, const std::string& what) {
    const std::vector<int64_t> idx = g.at("index");
    const std::vector<double> val = g.at("value");
    REQUIRE(idx.size() == val.size());
    CHECK_MESSAGE(!idx.empty(), what << ": the golden entry keeps no samples");
    int bad = 0;
    for (size_t k = 0; k < idx.size(); k++) {
        REQUIRE_MESSAGE((idx[k] >= 0 && idx[k] < n), what << ": golden index " << idx[k] << " outside " << n);
        const double d = std::fabs(ours[idx[k]] - val[k]), tol = atol + rtol * std::fabs(val[k]);
        note_margin(kind_of(what), d, tol);
        const bool first_bad = !(d <= tol) && bad++ == 0;
        if (first_bad)
            CHECK_MESSAGE(false, what << ": element " << idx[k] << " is " << ours[idx[k]] << ", PyTorch " << val[k]
                                      << " (|diff| " << d << " > " << tol << ")");
    }
    if (bad > 1) MESSAGE(what << ": " << bad << " of " << idx.size() << " samples outside the tolerance");
    const double ss = g.at("sum_squares");
    check_scalar(sum_squares(ours, n), ss, sum_squares_tolerance(ss, n, rtol, atol), what + ": sum of squares");
    if (g.contains("max_abs")) {
        double mx = 0;
        for (int64_t i = 0; i < n; i++) mx = std::max(mx, (double)std::fabs(ours[i]));
        const double ref = g.at("max_abs");
        check_scalar(mx, ref, atol + rtol * ref, what + ": max |x|");
    }
}

// one case: a fresh dump in `dir` against golden file `path`
void check_against_golden(const std::string& dir, const std::string& path) {
    const json meta = read_json(dir + "/meta.json"), gold = read_json(path);
    INFO("golden file " << path);
    // 1. the inputs: the same test, or the file is stale
    const std::vector<int32_t> tokens = read_bin<int32_t>(dir + "/tokens.bin");
    const std::vector<int32_t> targets = read_bin<int32_t>(dir + "/targets.bin");
    const std::vector<float> p0 = read_bin<float>(dir + "/params0.bin");
    const json& in = gold.at("inputs");
    const double ss0 = in.at("params0_sum_squares");
    const bool same_inputs = tokens == in.at("tokens").get<std::vector<int32_t>>() &&
                             targets == in.at("targets").get<std::vector<int32_t>>() &&
                             std::fabs(sum_squares(p0.data(), (int64_t)p0.size()) - ss0) <= 1e-9 * ss0 &&
                             meta.at("config") == gold.at("dump").at("config");
    REQUIRE_MESSAGE(same_inputs,
                    "the dump's inputs (config, tokens, targets or initial weights) differ from those " << path
                        << " was made from: the test's setup, the dataset or the initialisation changed. If that "
                           "was meant, regenerate it: PENTA_WRITE_GOLDEN=1 build/bin/tests_01 -tc='*golden*' (needs PyTorch)");

    // 2. loss and logits at the initial weights
    check_scalar(meta.at("loss"), gold.at("loss"), 1e-5 * std::fabs((double)gold.at("loss")), "loss");
    const std::vector<float> logits = read_bin<float>(dir + "/logits.bin");  // (B T, V)
    const int64_t N = (int64_t)tokens.size(), V = meta.at("config").at("vocab");
    REQUIRE(logits.size() == size_t(N * V));
    const json& gl = gold.at("logits");
    check_tensor(logits.data(), N * V, gl, 1e-4, 1e-5, "logits");
    const std::vector<double> row_loss = gl.at("row_loss"), row_ss = gl.at("row_sum_squares");
    REQUIRE(row_loss.size() == size_t(N));
    for (int64_t n = 0; n < N; n++) {
        const float* z = logits.data() + n * V;
        double mx = -INFINITY, s = 0;
        for (int64_t v = 0; v < V; v++) mx = std::max(mx, (double)z[v]);
        for (int64_t v = 0; v < V; v++) s += std::exp(z[v] - mx);
        const double lse = mx + std::log(s), loss = targets[n] >= 0 ? lse - z[targets[n]] : lse;
        check_scalar(loss, row_loss[n], 1e-5 * std::fabs(row_loss[n]) + 1e-6,
                     strfmt("token row %lld: its loss", (long long)n));
        check_scalar(sum_squares(z, V), row_ss[n], sum_squares_tolerance(row_ss[n], V, 1e-4, 1e-5),
                     strfmt("token row %lld: its logits' sum of squares", (long long)n));
    }

    // 3. every gradient, every weight after the AdamW steps, the step losses
    const std::vector<float> grads = read_bin<float>(dir + "/grads.bin"), p5 = read_bin<float>(dir + "/params5.bin");
    const double lr = meta.at("adamw").at("lr");
    REQUIRE(gold.at("grads").size() == meta.at("tensors").size());
    REQUIRE(gold.at("weights_after_steps").size() == meta.at("tensors").size());
    for (const json& t : meta.at("tensors")) {
        const std::string name = t.at("name");
        int64_t n = 1;
        for (int64_t d : t.at("shape").get<std::vector<int64_t>>()) n *= d;
        const int64_t off = t.at("offset");
        REQUIRE_MESSAGE(gold.at("grads").contains(name), path << " has no gradient of " << name);
        const json& gg = gold.at("grads").at(name);
        const double floor = gold.value("grad_floor", 1e-6);  // 1e-5 for a peaked model (torch_reference.py)
        check_tensor(grads.data() + off, n, gg, 1e-3, floor * (double)gg.at("max_abs") + 1e-9, "gradient of " + name);
        REQUIRE_MESSAGE(gold.at("weights_after_steps").contains(name), path << " has no weights of " << name);
        check_tensor(p5.data() + off, n, gold.at("weights_after_steps").at(name), 1e-4, 0.05 * lr,
                     strfmt("%s after %d steps", name.c_str(), (int)meta.at("steps")));
    }
    const std::vector<double> ours = meta.at("step_losses"), ref = gold.at("step_losses");
    REQUIRE(ours.size() == ref.size());
    for (size_t s = 0; s < ref.size(); s++)
        check_scalar(ours[s], ref[s], (s == 0 ? 1e-5 : 1e-4) * std::fabs(ref[s]), strfmt("loss of step %zu", s + 1));
}

// removes a dump folder however the case ends (a failed REQUIRE included)
struct RemovedAtEnd {
    std::string dir;
    ~RemovedAtEnd() { std::system(("rm -rf " + dir).c_str()); }
};

}  // namespace

TEST_SUITE("ch01 np1") {
    TEST_CASE("model, gradients and 5 AdamW steps agree with PyTorch's stored golden values (no PyTorch needed)") {
        const char* regen = std::getenv("PENTA_WRITE_GOLDEN");
        const bool write = regen && std::string(regen) == "1";
        const std::string py = write ? python_with_torch() : "";
        if (write) REQUIRE_MESSAGE(!py.empty(), "PENTA_WRITE_GOLDEN=1 needs a python3 that imports torch and numpy");
        for (const ReferenceCase& rc : reference_cases()) {
            const std::string name = rc.name;
            CAPTURE(name);
            const std::string dir = "/tmp/penta_golden_" + std::to_string(getpid()) + "_" + rc.name;
            const std::string path = kGoldenDir + "/" + rc.name + ".json";
            RemovedAtEnd cleanup{dir};
            write_reference_dump(rc, dir);
            if (write) {
                std::system(("mkdir -p " + kGoldenDir).c_str());
                const int rc_py = std::system((py + " " PENTA_SOURCE_DIR "/tools/torch_reference.py " + dir +
                                               " --write-golden " + path).c_str());
                REQUIRE_MESSAGE(rc_py == 0, "tools/torch_reference.py disagrees with our model, so " << path
                                                                                                   << " was not written");
            }
            REQUIRE_MESSAGE(std::ifstream(path).good(),
                            path << " is missing: make it with PENTA_WRITE_GOLDEN=1 build/bin/tests_01 -tc='*golden*' (needs PyTorch)");
            g_margin.clear();
            check_against_golden(dir, path);
            std::string line;
            for (const auto& [kind, m] : g_margin) line += strfmt(" %s %.2g,", kind.c_str(), m);
            std::printf("golden %s: largest |ours - PyTorch| / tolerance:%s\n", rc.name, line.c_str());
        }
    }
}
