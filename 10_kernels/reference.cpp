// reference.cpp — the fp64 references of reference.hpp: plain loops in double, split over the CPU's cores.
//
// Playbook: "Diving into the GPUs" (the simple version every fast kernel is checked against).
//   build/bin/tests_10 -tc='*reference*'
#include "reference.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "../common/core.hpp"

namespace penta::lab {

void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
    const int64_t workers = std::min<int64_t>(n, std::max(1u, std::thread::hardware_concurrency()));
    if (workers <= 1) {
        for (int64_t i = 0; i < n; i++) fn(i);
        return;
    }
    std::atomic<int64_t> next{0};
    std::vector<std::thread> pool;
    for (int64_t w = 0; w < workers; w++)
        pool.emplace_back([&] {
            for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
        });
    for (auto& t : pool) t.join();
}

std::vector<double> gemm_ref(const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool b_nk,
                             const std::vector<int64_t>& rows) {
    std::vector<int64_t> r = rows;
    if (r.empty())
        for (int64_t i = 0; i < M; i++) r.push_back(i);
    std::vector<double> C(r.size() * (size_t)N, 0.0);
    parallel_for((int64_t)r.size(), [&](int64_t ri) {
        const int64_t i = r[(size_t)ri];
        CHECK(i >= 0 && i < M, "gemm_ref: row %ld outside 0..%ld", (long)i, (long)M - 1);
        double* c = C.data() + ri * N;
        const float* a = A + i * K;
        if (b_nk) {
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += (double)a[k] * B[j * K + k];
                c[j] = s;
            }
        } else {
            for (int64_t k = 0; k < K; k++) {
                const double ak = a[k];
                const float* b = B + k * N;
                for (int64_t j = 0; j < N; j++) c[j] += ak * b[j];
            }
        }
    });
    return C;
}

void rmsnorm_fwd_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t N, int64_t h, double eps,
                     std::vector<double>& y, std::vector<double>& rstd) {
    y.assign((size_t)(N * h), 0.0);
    rstd.assign((size_t)N, 0.0);
    parallel_for(N, [&](int64_t r) {
        double ss = 0;
        for (int64_t j = 0; j < h; j++) ss += (double)x[r * h + j] * x[r * h + j];
        rstd[r] = 1.0 / std::sqrt(ss / (double)h + eps);
        for (int64_t j = 0; j < h; j++) y[r * h + j] = x[r * h + j] * rstd[r] * w[j];
    });
}

void rmsnorm_bwd_ref(const std::vector<float>& dy, const std::vector<float>& x, const std::vector<float>& w,
                     int64_t N, int64_t h, double eps, std::vector<double>& dx, std::vector<double>& dw) {
    std::vector<double> y, rstd;
    rmsnorm_fwd_ref(x, w, N, h, eps, y, rstd);
    dx.assign((size_t)(N * h), 0.0);
    // dx = rstd·(w∘dy) - x·rstd^3·mean(w∘dy∘x): the gradient of x·rstd(x) through the shared rstd
    parallel_for(N, [&](int64_t r) {
        double dot = 0;
        for (int64_t j = 0; j < h; j++) dot += (double)w[j] * dy[r * h + j] * x[r * h + j];
        const double c = dot / (double)h * rstd[r] * rstd[r] * rstd[r];
        for (int64_t j = 0; j < h; j++) dx[r * h + j] = rstd[r] * w[j] * dy[r * h + j] - x[r * h + j] * c;
    });
    dw.assign((size_t)h, 0.0);
    parallel_for(h, [&](int64_t j) {
        double s = 0;
        for (int64_t r = 0; r < N; r++) s += (double)dy[r * h + j] * x[r * h + j] * rstd[r];
        dw[j] = s;
    });
}

std::vector<double> rope_ref(const std::vector<float>& x, const std::vector<int32_t>& pos, int64_t B, int64_t T,
                             int64_t H, int64_t D, double theta, bool inverse) {
    std::vector<double> out(x.size());
    const int64_t half = D / 2;
    parallel_for(B * T, [&](int64_t bt) {
        const double p = pos[(size_t)(bt % T)];
        for (int64_t i = 0; i < half; i++) {
            const double a = p * std::pow(theta, -2.0 * (double)i / (double)D) * (inverse ? -1.0 : 1.0);
            const double c = std::cos(a), s = std::sin(a);
            for (int64_t hh = 0; hh < H; hh++) {
                const int64_t o = (bt * H + hh) * D;
                const double x1 = x[o + i], x2 = x[o + i + half];
                out[o + i] = x1 * c - x2 * s;  // rotate_half: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s)
                out[o + i + half] = x2 * c + x1 * s;
            }
        }
    });
    return out;
}

std::vector<double> swiglu_fwd_ref(const std::vector<float>& g, const std::vector<float>& u) {
    std::vector<double> out(g.size());
    for (size_t i = 0; i < g.size(); i++) out[i] = g[i] / (1.0 + std::exp(-(double)g[i])) * u[i];
    return out;
}

void swiglu_bwd_ref(const std::vector<float>& dout, const std::vector<float>& g, const std::vector<float>& u,
                    std::vector<double>& dg, std::vector<double>& du) {
    dg.resize(g.size());
    du.resize(g.size());
    for (size_t i = 0; i < g.size(); i++) {
        const double s = 1.0 / (1.0 + std::exp(-(double)g[i]));  // silu'(g) = s·(1 + g·(1 - s))
        du[i] = dout[i] * g[i] * s;
        dg[i] = dout[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
    }
}

void cross_entropy_ref(const std::vector<float>& logits, const std::vector<int32_t>& targets, int64_t N,
                       int64_t V, double scale, std::vector<double>& loss, std::vector<double>& dlogits) {
    loss.assign((size_t)N, 0.0);
    dlogits.assign((size_t)(N * V), 0.0);
    parallel_for(N, [&](int64_t r) {
        const int32_t t = targets[(size_t)r];
        if (t < 0) return;
        const float* x = logits.data() + r * V;
        double m = x[0];
        for (int64_t j = 1; j < V; j++) m = std::max(m, (double)x[j]);
        double s = 0;
        for (int64_t j = 0; j < V; j++) s += std::exp(x[j] - m);
        const double lse = m + std::log(s);
        loss[r] = lse - x[t];
        for (int64_t j = 0; j < V; j++) dlogits[r * V + j] = (std::exp(x[j] - lse) - (j == t ? 1.0 : 0.0)) * scale;
    });
}

void adamw_ref(const std::vector<float>& p, const std::vector<float>& g, const std::vector<float>& m,
               const std::vector<float>& v, const AdamWRef& c, int step, std::vector<double>& p_out,
               std::vector<double>& m_out, std::vector<double>& v_out) {
    const size_t n = p.size();
    p_out.resize(n), m_out.resize(n), v_out.resize(n);
    const double bc1 = 1.0 - std::pow(c.beta1, step), bc2 = 1.0 - std::pow(c.beta2, step);
    for (size_t i = 0; i < n; i++) {
        m_out[i] = c.beta1 * m[i] + (1.0 - c.beta1) * g[i];
        v_out[i] = c.beta2 * v[i] + (1.0 - c.beta2) * (double)g[i] * g[i];
        const double decayed = p[i] * (1.0 - c.lr * c.weight_decay);
        p_out[i] = decayed - c.lr * (m_out[i] / bc1) / (std::sqrt(v_out[i] / bc2) + c.eps);
    }
}

AttnGroupRef attention_ref(const AttnShape& s, const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, const std::vector<float>& dout, int64_t b, int64_t kvh) {
    const int64_t g = s.H / s.Hkv, T = s.T, D = s.D;
    const double scale = 1.0 / std::sqrt((double)D);
    const bool backward = !dout.empty();
    auto Q = [&](int64_t h, int64_t t) { return q.data() + ((b * T + t) * s.H + kvh * g + h) * D; };
    auto dO = [&](int64_t h, int64_t t) { return dout.data() + ((b * T + t) * s.H + kvh * g + h) * D; };
    auto Kr = [&](int64_t t) { return k.data() + ((b * T + t) * s.Hkv + kvh) * D; };
    auto Vr = [&](int64_t t) { return v.data() + ((b * T + t) * s.Hkv + kvh) * D; };
    auto dot = [D](const float* x, const float* y) {
        double r = 0;
        for (int64_t d = 0; d < D; d++) r += (double)x[d] * y[d];
        return r;
    };
    AttnGroupRef r;
    r.out.assign((size_t)(g * T * D), 0.0);
    r.lse.assign((size_t)(g * T), 0.0);
    std::vector<double> Drow((size_t)(g * T), 0.0);  // D_i = dO_i · O_i
    if (backward) r.dq.assign((size_t)(g * T * D), 0.0);
    // pass 1, one (head, query) per task: lse, out, and in backward D_i and dq_i
    parallel_for(g * T, [&](int64_t hi) {
        const int64_t h = hi / T, i = hi % T;
        std::vector<double> p((size_t)(i + 1));
        double m = -INFINITY;
        for (int64_t j = 0; j <= i; j++) m = std::max(m, p[j] = scale * dot(Q(h, i), Kr(j)));
        double sum = 0;
        for (int64_t j = 0; j <= i; j++) sum += std::exp(p[j] - m);
        const double lse = m + std::log(sum);
        r.lse[hi] = lse;
        double* o = r.out.data() + hi * D;
        for (int64_t j = 0; j <= i; j++) {
            p[j] = std::exp(p[j] - lse);
            for (int64_t d = 0; d < D; d++) o[d] += p[j] * Vr(j)[d];
        }
        if (!backward) return;
        double Di = 0;
        for (int64_t d = 0; d < D; d++) Di += o[d] * dO(h, i)[d];
        Drow[hi] = Di;
        double* dq = r.dq.data() + hi * D;
        for (int64_t j = 0; j <= i; j++) {
            const double ds = p[j] * (dot(dO(h, i), Vr(j)) - Di);
            for (int64_t d = 0; d < D; d++) dq[d] += scale * ds * Kr(j)[d];
        }
    });
    if (!backward) return r;
    // pass 2, one key per task: dk_j and dv_j summed over the group's heads and the queries i >= j
    r.dk.assign((size_t)(T * D), 0.0);
    r.dv.assign((size_t)(T * D), 0.0);
    parallel_for(T, [&](int64_t j) {
        double* dk = r.dk.data() + j * D;
        double* dv = r.dv.data() + j * D;
        for (int64_t h = 0; h < g; h++)
            for (int64_t i = j; i < T; i++) {
                const double p = std::exp(scale * dot(Q(h, i), Kr(j)) - r.lse[h * T + i]);
                const double ds = p * (dot(dO(h, i), Vr(j)) - Drow[h * T + i]);
                for (int64_t d = 0; d < D; d++) {
                    dv[d] += p * dO(h, i)[d];
                    dk[d] += scale * ds * Q(h, i)[d];
                }
            }
    });
    return r;
}

std::vector<float> group_rows(const std::vector<float>& x, const AttnShape& s, int64_t heads, int64_t b, int64_t h0,
                              int64_t nh) {
    std::vector<float> r;
    r.reserve((size_t)(nh * s.T * s.D));
    for (int64_t h = h0; h < h0 + nh; h++)
        for (int64_t t = 0; t < s.T; t++) {
            const float* row = x.data() + ((b * s.T + t) * heads + h) * s.D;
            r.insert(r.end(), row, row + s.D);
        }
    return r;
}

std::vector<float> group_lse(const std::vector<float>& lse, const AttnShape& s, int64_t b, int64_t kvh) {
    const int64_t g = s.H / s.Hkv;
    return std::vector<float>(lse.begin() + (b * s.H + kvh * g) * s.T, lse.begin() + (b * s.H + kvh * g + g) * s.T);
}

}  // namespace penta::lab
