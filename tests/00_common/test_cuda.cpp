// test_cuda.cpp — the CUDA backend (common/cuda/*.cu) against the CPU reference: every op, forward and
// backward, on the same inputs; dtype conversions bit for bit against core.hpp's host conversions.
//
// Playbook: "GPU kernels" / "Flash attention" — a kernel is only trusted once it matches a simple reference.
// Uses only the public API (Device::cuda tensors), so it compiles in a CPU-only build, where every case
// is reported as skipped.
//   build/bin/tests_00 -ts='ch00 np1' -tc='*cuda*'        (scripts/gpu_check.sh runs it on a GPU machine)
#include <cfloat>
#include <cmath>
#include <cstring>

#include "../testing.hpp"

using namespace penta;
using namespace penta::testing;

namespace {

Tensor on_gpu(const Tensor& t) { return t.clone(Device::cuda, Tag::workspace); }

// element-wise comparison of a CUDA result with the CPU reference (fp32 tolerances by default)
void compare(const Tensor& cuda, const Tensor& cpu, const std::string& what, double rtol = 1e-5, double atol = 1e-5) {
    check_close(cuda.to_host(), cpu.to_host(), rtol, atol, what);
}

// as compare, but -inf entries (lse of rows that see no key) must sit at the same places
void compare_with_inf(const Tensor& cuda, const Tensor& cpu, const std::string& what, double rtol, double atol) {
    auto a = cuda.to_host(), b = cpu.to_host();
    REQUIRE(a.size() == b.size());
    int mismatched = 0;
    for (size_t i = 0; i < a.size(); i++) {
        if (std::isinf(a[i]) || std::isinf(b[i])) {
            mismatched += a[i] != b[i];
            a[i] = b[i] = 0;
        }
    }
    CHECK_MESSAGE(mismatched == 0, what << ": " << mismatched << " infinities differ");
    check_close(a, b, rtol, atol, what);
}

// raw codes of a tensor of any dtype (1, 2 or 4 bytes per element), read on the host
std::vector<uint32_t> codes(const Tensor& t) {
    Tensor h = t.clone(Device::cpu, Tag::workspace);
    const size_t w = dtype_size(t.dtype);
    std::vector<uint32_t> out(t.numel(), 0);
    for (size_t i = 0; i < out.size(); i++) std::memcpy(&out[i], (const char*)h.data() + i * w, w);
    return out;
}

Tensor from_codes(const std::vector<uint32_t>& c, DType dtype) {
    Tensor t = Tensor::empty({(int64_t)c.size()}, dtype, Device::cpu, Tag::workspace);
    const size_t w = dtype_size(dtype);
    for (size_t i = 0; i < c.size(); i++) std::memcpy((char*)t.data() + i * w, &c[i], w);
    return t;
}

// same codes, except that any NaN equals any NaN (the intrinsics return a canonical NaN)
void check_same_codes(const Tensor& cuda, const Tensor& cpu, const std::string& what) {
    auto a = codes(cuda), b = codes(cpu);
    auto va = cuda.to_host(), vb = cpu.to_host();
    REQUIRE(a.size() == b.size());
    size_t bad = 0, first = a.size();
    for (size_t i = 0; i < a.size(); i++) {
        if (a[i] == b[i] || (std::isnan(va[i]) && std::isnan(vb[i]))) continue;
        if (!bad++) first = i;
    }
    CHECK_MESSAGE(bad == 0, what << strfmt(": %zu codes differ, first at %zu: cuda 0x%x, cpu 0x%x", bad, first,
                                           first < a.size() ? a[first] : 0, first < a.size() ? b[first] : 0));
}

double host_decode(DType t, uint32_t code) {
    switch (t) {
        case DType::bf16: return bf16_to_f32((uint16_t)code);
        case DType::f16: return f16_to_f32((uint16_t)code);
        case DType::e4m3: return e4m3_to_f32((uint8_t)code);
        default: return e5m2_to_f32((uint8_t)code);
    }
}

// f32 values that probe a narrow format: every midpoint between neighbouring codes (ties) and the floats
// just beside it, zeros, f32 subnormals, the saturation edges, infinities, NaN and a wide random spread
std::vector<float> conversion_sweep(DType t) {
    std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, -1e-40f, FLT_MIN, FLT_MAX, -FLT_MAX, 448.0f, 464.0f,
                            480.0f, 57344.0f, 61440.0f, 65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f, INFINITY,
                            -INFINITY, NAN};
    const uint32_t n = dtype_size(t) == 1 ? 0x80 : 0x8000;  // positive codes
    for (uint32_t c = 0; c + 1 < n; c++) {
        double lo = host_decode(t, c), hi = host_decode(t, c + 1);
        if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
        float mid = (float)((lo + hi) / 2);  // exact: one bit more than the narrow mantissa
        for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
            v.push_back(x);
            v.push_back(-x);
        }
    }
    std::vector<float> r = random_tensor({4096}, 99).to_host();
    for (size_t i = 0; i < r.size(); i++) v.push_back(std::ldexp(r[i], (int)(i % 80) - 40));
    return v;
}

// the forward/backward pair of one attention kind on CPU and CUDA, same inputs, compared
struct AttnCase {
    int64_t B, Tq, Tk, nh, nkv, hd;
    AttnSpan span;
};

void check_attention(const AttnCase& c, bool tiled, bool keep_probs) {
    const std::string what = strfmt("%s attention B%ld Tq%ld Tk%ld nh%ld nkv%ld hd%ld q@%ld k@%ld %s%s",
                                    tiled ? "tiled" : "naive", (long)c.B, (long)c.Tq, (long)c.Tk, (long)c.nh,
                                    (long)c.nkv, (long)c.hd, (long)c.span.q_offset, (long)c.span.k_offset,
                                    c.span.causal ? "causal" : "full", keep_probs ? " probs" : "");
    Tensor q = random_tensor({c.B, c.Tq, c.nh, c.hd}, 1), k = random_tensor({c.B, c.Tk, c.nkv, c.hd}, 2),
           v = random_tensor({c.B, c.Tk, c.nkv, c.hd}, 3), dout = random_tensor(q.shape, 4);
    Tensor out = Tensor::zeros(q.shape, DType::f32, Device::cpu, Tag::workspace),
           lse = Tensor::zeros({c.B, c.nh, c.Tq}, DType::f32, Device::cpu, Tag::workspace),
           probs = Tensor::zeros({c.B, c.nh, c.Tq, c.Tk}, DType::f32, Device::cpu, Tag::workspace);
    Tensor g_out = on_gpu(out), g_lse = on_gpu(lse), g_probs = on_gpu(probs);
    if (tiled) {
        attention_forward_tiled(q, k, v, out, lse, c.span);
        attention_forward_tiled(on_gpu(q), on_gpu(k), on_gpu(v), g_out, g_lse, c.span);
    } else {
        attention_forward_naive(q, k, v, out, lse, keep_probs ? &probs : nullptr, c.span);
        attention_forward_naive(on_gpu(q), on_gpu(k), on_gpu(v), g_out, g_lse, keep_probs ? &g_probs : nullptr,
                                c.span);
        if (keep_probs) compare(g_probs, probs, what + " probs", 1e-4, 1e-6);
    }
    compare(g_out, out, what + " out", 1e-4, 1e-5);
    compare_with_inf(g_lse, lse, what + " lse", 1e-4, 1e-5);

    // backward from the same (CPU) forward results; gradients start non-zero: they accumulate
    Tensor dq = random_tensor(q.shape, 5), dk = random_tensor(k.shape, 6), dv = random_tensor(k.shape, 7);
    Tensor g_dq = on_gpu(dq), g_dk = on_gpu(dk), g_dv = on_gpu(dv), g_probs_in = on_gpu(probs);
    if (tiled) {
        attention_backward_tiled(dout, q, k, v, out, lse, dq, dk, dv, c.span);
        attention_backward_tiled(on_gpu(dout), on_gpu(q), on_gpu(k), on_gpu(v), on_gpu(out), on_gpu(lse), g_dq,
                                 g_dk, g_dv, c.span);
    } else {
        attention_backward_naive(dout, q, k, v, out, lse, keep_probs ? &probs : nullptr, dq, dk, dv, c.span);
        attention_backward_naive(on_gpu(dout), on_gpu(q), on_gpu(k), on_gpu(v), on_gpu(out), on_gpu(lse),
                                 keep_probs ? &g_probs_in : nullptr, g_dq, g_dk, g_dv, c.span);
    }
    compare(g_dq, dq, what + " dq", 1e-4, 1e-5);
    compare(g_dk, dk, what + " dk", 1e-4, 1e-5);
    compare(g_dv, dv, what + " dv", 1e-4, 1e-5);
}

const AttnCase kAttnCases[] = {
    {2, 70, 70, 4, 2, 16, {0, 0, true}},    // causal self-attention over more than one 64-query tile, GQA
    {1, 5, 37, 2, 1, 8, {0, 0, false}},     // no mask, Tq != Tk
    {1, 50, 20, 2, 2, 16, {0, 40, true}},   // keys after queries 0..39: those rows see nothing
    {2, 33, 96, 3, 1, 32, {64, 0, true}},   // a later query block (context parallelism), group of 3
};

}  // namespace

TEST_SUITE("ch00 np1") {

TEST_CASE("[gpu] cuda memory: zeros, copies across devices, accounting") {
    SKIP_WITHOUT_GPU();
    const int64_t before = mem_stats(Device::cuda).total_current;
    Tensor z = Tensor::zeros({3, 5}, DType::f32, Device::cuda, Tag::activations);
    CHECK(mem_stats(Device::cuda).total_current == before + 60);
    check_close(z.to_host(), std::vector<float>(15, 0.0f), 0, 0, "zeros");
    Tensor h = random_tensor({3, 5}, 11);
    Tensor d = on_gpu(h), d2 = Tensor::empty({3, 5}, DType::f32, Device::cuda, Tag::workspace);
    copy(d2, d);  // device to device
    device_synchronize(Device::cuda);
    check_close(d2.to_host(), h.to_host(), 0, 0, "round trip host -> device -> device -> host");
}

TEST_CASE("[gpu] cuda matmul and linear match cpu") {
    SKIP_WITHOUT_GPU();
    const int64_t M = 5, K = 7, N = 9;
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++)
            for (bool sharedB : {true, false}) {
                Tensor A = random_tensor(tA ? Shape{2, 3, K, M} : Shape{2, 3, M, K}, 20);
                Shape bs = tB ? Shape{N, K} : Shape{K, N};
                if (!sharedB) bs.insert(bs.begin(), {2, 3});
                Tensor B = random_tensor(bs, 21), C = random_tensor({2, 3, M, N}, 22), gC = on_gpu(C);
                matmul(A, B, C, tA, tB, 0.5f, 0.7f);
                matmul(on_gpu(A), on_gpu(B), gC, tA, tB, 0.5f, 0.7f);
                compare(gC, C, strfmt("matmul transA %d transB %d sharedB %d", tA, tB, (int)sharedB));
            }
    Tensor x = random_tensor({6, 10}, 23), W = random_tensor({4, 10}, 24), dy = random_tensor({6, 4}, 25);
    Tensor y = Tensor::empty({6, 4}, DType::f32, Device::cpu, Tag::workspace), gy = on_gpu(y);
    linear_forward(x, W, y);
    linear_forward(on_gpu(x), on_gpu(W), gy);
    compare(gy, y, "linear y");
    Tensor dx = Tensor::empty({6, 10}, DType::f32, Device::cpu, Tag::workspace), dW = random_tensor({4, 10}, 26);
    Tensor gdx = on_gpu(dx), gdW = on_gpu(dW);
    linear_backward(dy, x, W, dx, dW);
    linear_backward(on_gpu(dy), on_gpu(x), on_gpu(W), gdx, gdW);
    compare(gdx, dx, "linear dx");
    compare(gdW, dW, "linear dW (accumulated)");
}

TEST_CASE("[gpu] cuda embedding matches cpu") {
    SKIP_WITHOUT_GPU();
    const int64_t V = 11, h = 300, start = 3;
    Tensor tokens = random_tokens({40}, 16, 30);  // ids 0..15: some outside this shard [3, 14), many repeats
    Tensor table = random_tensor({V, h}, 31), dout = random_tensor({40, h}, 32), dtable = random_tensor({V, h}, 33);
    Tensor out = Tensor::empty({40, h}, DType::f32, Device::cpu, Tag::workspace), gout = on_gpu(out);
    Tensor gdtable = on_gpu(dtable), gtokens = on_gpu(tokens);
    embedding_forward(tokens, table, out, start);
    embedding_forward(gtokens, on_gpu(table), gout, start);
    compare(gout, out, "embedding out", 0, 0);
    embedding_backward(tokens, dout, dtable, start);
    embedding_backward(gtokens, on_gpu(dout), gdtable, start);
    compare(gdtable, dtable, "embedding dtable (accumulated)");
}

TEST_CASE("[gpu] cuda rmsnorm matches cpu") {
    SKIP_WITHOUT_GPU();
    for (int64_t N : {3, 100}) {  // 100 rows > the 64 row groups of the dw reduction
        const int64_t h = 300;    // > one block of threads per row
        Tensor x = random_tensor({N, h}, 40), w = random_tensor({h}, 41), dy = random_tensor({N, h}, 42);
        Tensor y = Tensor::empty({N, h}, DType::f32, Device::cpu, Tag::workspace), rstd = random_tensor({N}, 43);
        Tensor dx = Tensor::empty({N, h}, DType::f32, Device::cpu, Tag::workspace), dw = random_tensor({h}, 44);
        Tensor gy = on_gpu(y), grstd = on_gpu(rstd), gdx = on_gpu(dx), gdw = on_gpu(dw);
        rmsnorm_forward(x, w, y, rstd, 1e-5f);
        rmsnorm_forward(on_gpu(x), on_gpu(w), gy, grstd, 1e-5f);
        compare(gy, y, "rmsnorm y");
        compare(grstd, rstd, "rmsnorm rstd");
        rmsnorm_backward(dy, x, w, rstd, dx, dw);
        rmsnorm_backward(on_gpu(dy), on_gpu(x), on_gpu(w), on_gpu(rstd), gdx, gdw);
        compare(gdx, dx, "rmsnorm dx", 1e-4, 1e-5);
        compare(gdw, dw, "rmsnorm dw (accumulated)", 1e-4, 1e-5);
    }
}

TEST_CASE("[gpu] cuda rope matches cpu, in place too") {
    SKIP_WITHOUT_GPU();
    Tensor x = random_tensor({2, 5, 3, 16}, 50), pos = Tensor::from_host_i32({7, 3, 0, 12, 30}, {5}, Device::cpu);
    Tensor out = Tensor::empty(x.shape, DType::f32, Device::cpu, Tag::workspace), gout = on_gpu(out);
    std::vector<float> freqs(8);  // the default table of rope.hpp, theta 10000, hd 16
    for (int i = 0; i < 8; i++) freqs[i] = 1.0f / powf(10000.0f, (float)(2 * i) / 16.0f);
    Tensor freq = Tensor::from_host(freqs, {8}, Device::cpu), gfreq = on_gpu(freq);
    Tensor gx = on_gpu(x), gpos = on_gpu(pos);
    rope_forward(x, pos, freq, out);
    rope_forward(gx, gpos, gfreq, gout);
    compare(gout, out, "rope out", 1e-5, 5e-5);
    rope_forward(gx, gpos, gfreq, gx);  // out aliases x
    compare(gx, out, "rope out in place", 1e-5, 5e-5);
    Tensor dx = Tensor::empty(x.shape, DType::f32, Device::cpu, Tag::workspace), gdx = on_gpu(dx);
    rope_backward(out, pos, freq, dx);
    rope_backward(gout, gpos, gfreq, gdx);
    compare(gdx, dx, "rope dx", 1e-5, 5e-5);
}

TEST_CASE("[gpu] cuda swiglu matches cpu") {
    SKIP_WITHOUT_GPU();
    Tensor gate = random_tensor({7, 33}, 60, 3.0f), up = random_tensor({7, 33}, 61), dout = random_tensor({7, 33}, 62);
    Tensor out = Tensor::empty(gate.shape, DType::f32, Device::cpu, Tag::workspace), gout = on_gpu(out);
    swiglu_forward(gate, up, out);
    swiglu_forward(on_gpu(gate), on_gpu(up), gout);
    compare(gout, out, "swiglu out");
    Tensor dg = Tensor::empty(gate.shape, DType::f32, Device::cpu, Tag::workspace),
           du = Tensor::empty(gate.shape, DType::f32, Device::cpu, Tag::workspace);
    Tensor gdg = on_gpu(dg), gdu = on_gpu(du);
    swiglu_backward(dout, gate, up, dg, du);
    swiglu_backward(on_gpu(dout), on_gpu(gate), on_gpu(up), gdg, gdu);
    compare(gdg, dg, "swiglu dgate");
    compare(gdu, du, "swiglu dup");
}

TEST_CASE("[gpu] cuda cross entropy matches cpu, dlogits aliasing logits") {
    SKIP_WITHOUT_GPU();
    const int64_t N = 6, V = 1000;
    Tensor logits = random_tensor({N, V}, 70, 2.0f);
    std::vector<int32_t> t = random_tokens({N}, (int32_t)V, 71).to_host_i32();
    t[2] = -100;  // ignored row
    Tensor targets = Tensor::from_host_i32(t, {N}, Device::cpu), gtargets = on_gpu(targets);
    Tensor dlogits = Tensor::empty({N, V}, DType::f32, Device::cpu, Tag::workspace);
    Tensor losses = Tensor::empty({N}, DType::f32, Device::cpu, Tag::workspace), glosses = on_gpu(losses);
    double sum = cross_entropy_forward_backward(logits, targets, dlogits, 0.2f, -100, losses);
    Tensor glogits = on_gpu(logits);
    double gsum = cross_entropy_forward_backward(glogits, gtargets, glogits, 0.2f, -100, glosses);  // in place
    CHECK(gsum == doctest::Approx(sum).epsilon(1e-6));
    compare(glosses, losses, "cross entropy losses");
    compare(glogits, dlogits, "cross entropy dlogits (in place)", 1e-5, 1e-8);
    Tensor none;  // loss only: neither dlogits nor losses
    CHECK(cross_entropy_forward_backward(on_gpu(logits), gtargets, none, 1.0f, -100, none) ==
          doctest::Approx(sum).epsilon(1e-6));
    t[0] = (int32_t)V;  // outside the vocabulary and not ignore_index: an error, not a silent 0
    CHECK_THROWS_AS(cross_entropy_forward_backward(on_gpu(logits), Tensor::from_host_i32(t, {N}, Device::cuda), none,
                                                   1.0f, -100, none),
                    penta::Error);
}

TEST_CASE("[gpu] cuda adamw, sum_squares and elementwise ops match cpu") {
    SKIP_WITHOUT_GPU();
    Tensor p = random_tensor({1000}, 80), m = random_tensor({1000}, 81, 0.1f);
    Tensor v = Tensor::zeros({1000}, DType::f32, Device::cpu, Tag::workspace);  // a second moment is >= 0
    Tensor gp = on_gpu(p), gm = on_gpu(m), gv = on_gpu(v);
    AdamWConfig cfg;
    for (int step = 1; step <= 3; step++) {
        Tensor g = random_tensor({1000}, 83 + step);
        adamw_step(p, g, m, v, cfg, step, 0.5f);
        adamw_step(gp, on_gpu(g), gm, gv, cfg, step, 0.5f);
    }
    compare(gp, p, "adamw param");
    compare(gm, m, "adamw m");
    compare(gv, v, "adamw v");

    Tensor big = random_tensor({300000}, 90), gbig = on_gpu(big);  // more elements than the partial-sum blocks
    const double ss = sum_squares(gbig);
    CHECK(ss == doctest::Approx(sum_squares(big)).epsilon(1e-9));
    CHECK(ss == sum_squares(gbig));  // deterministic: bit-identical on a second call

    Tensor a = random_tensor({37}, 91), b = random_tensor({37}, 92), out = random_tensor({37}, 93);
    Tensor ga = on_gpu(a), gb = on_gpu(b), gout = on_gpu(out);
    add(a, b, out);
    add(ga, gb, gout);
    compare(gout, out, "add", 0, 0);
    add(ga, gb, ga);  // out aliases a
    compare(ga, out, "add in place", 0, 0);
    Tensor acc = random_tensor({37}, 94), gacc = on_gpu(acc);
    add_inplace(acc, b, -0.3f);
    add_inplace(gacc, gb, -0.3f);
    compare(gacc, acc, "add_inplace");
    scale_inplace(acc, 1.7f);
    scale_inplace(gacc, 1.7f);
    compare(gacc, acc, "scale_inplace");
    for (DType t : {DType::f32, DType::bf16, DType::f16, DType::e4m3, DType::e5m2, DType::i32}) {
        Tensor c = Tensor::empty({45}, t, Device::cpu, Tag::workspace), gc = on_gpu(c);
        fill(c, t == DType::i32 ? -7.0f : -3.3f);
        fill(gc, t == DType::i32 ? -7.0f : -3.3f);
        check_same_codes(gc, c, strfmt("fill %s", dtype_name(t)));
    }
}

TEST_CASE("[gpu] cuda dtype conversions are bit-exact with the host conversions") {
    SKIP_WITHOUT_GPU();
    for (DType t : {DType::bf16, DType::f16, DType::e4m3, DType::e5m2}) {
        std::vector<float> vals = conversion_sweep(t);
        Tensor src = Tensor::from_host(vals, {(int64_t)vals.size()}, Device::cpu);
        Tensor dst = Tensor::empty(src.shape, t, Device::cpu, Tag::workspace), gdst = on_gpu(dst);
        convert(dst, src);
        convert(gdst, on_gpu(src));
        check_same_codes(gdst, dst, strfmt("f32 -> %s", dtype_name(t)));

        std::vector<uint32_t> all(dtype_size(t) == 1 ? 0x100 : 0x10000);  // every code, back to f32
        for (uint32_t c = 0; c < all.size(); c++) all[c] = c;
        Tensor narrow = from_codes(all, t);
        Tensor wide = Tensor::empty(narrow.shape, DType::f32, Device::cpu, Tag::workspace), gwide = on_gpu(wide);
        convert(wide, narrow);
        convert(gwide, on_gpu(narrow));
        check_same_codes(gwide, wide, strfmt("%s -> f32", dtype_name(t)));
    }
}

TEST_CASE("[gpu] cuda init_normal matches cpu, shards included") {
    SKIP_WITHOUT_GPU();
    struct Shard { Shape shape; int64_t row0, col0, full_cols; };
    for (const Shard& s : {Shard{{6, 10}, 2, 5, 25}, Shard{{64, 33}, 0, 0, -1}, Shard{{1000}, 0, 0, -1}}) {
        Tensor x = Tensor::empty(s.shape, DType::f32, Device::cpu, Tag::workspace), gx = on_gpu(x);
        init_normal(x, 42, 7, 0.02f, s.row0, s.col0, s.full_cols);
        init_normal(gx, 42, 7, 0.02f, s.row0, s.col0, s.full_cols);
        compare(gx, x, "init_normal " + shape_str(s.shape), 1e-6, 1e-12);  // logf/cosf differ in the last bits
    }
}

TEST_CASE("[gpu] cuda attention (naive and tiled) matches cpu") {
    SKIP_WITHOUT_GPU();
    for (const AttnCase& c : kAttnCases) {
        check_attention(c, false, true);
        check_attention(c, false, false);
        check_attention(c, true, false);
    }
    // rows that see no key: out = 0 and lse = -inf on the GPU itself, not only "as on the CPU"
    const AttnCase& c = kAttnCases[2];
    Tensor out = Tensor::empty({c.B, c.Tq, c.nh, c.hd}, DType::f32, Device::cuda, Tag::workspace);
    Tensor lse = Tensor::empty({c.B, c.nh, c.Tq}, DType::f32, Device::cuda, Tag::workspace);
    attention_forward_tiled(on_gpu(random_tensor(out.shape, 1)), on_gpu(random_tensor({c.B, c.Tk, c.nkv, c.hd}, 2)),
                            on_gpu(random_tensor({c.B, c.Tk, c.nkv, c.hd}, 3)), out, lse, c.span);
    auto o = out.to_host(), l = lse.to_host();
    CHECK(std::isinf(l[0]));
    CHECK(l[0] < 0);
    CHECK(std::isfinite(l[c.Tq - 1]));
    CHECK(o[0] == 0.0f);
}

}  // TEST_SUITE
