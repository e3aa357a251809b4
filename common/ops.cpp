// ops.cpp — the front door of every op: check operands (shapes, dtypes, one device), then dispatch to the
// CPU reference (penta::cpu) or the CUDA backend (penta::cuda). See ops.hpp for what each op computes.
#include "ops.hpp"
#include "linear_gemm.hpp"

#include <atomic>
#include <cstring>

#include "ops_backend.hpp"

namespace penta {

namespace {

// a backend call: cpu::f(args...) or cuda::f(args...), by the device of the first operand
#if defined(PENTA_CUDA)
#define DISPATCH(dev, fn, ...) ((dev) == Device::cpu ? cpu::fn(__VA_ARGS__) : cuda::fn(__VA_ARGS__))
#else
#define DISPATCH(dev, fn, ...)                                                                   \
    ((dev) == Device::cpu ? cpu::fn(__VA_ARGS__)                                                 \
                          : (FAIL("%s on a cuda tensor, but this build has no CUDA (make CUDA=1)", #fn), \
                             cpu::fn(__VA_ARGS__)))
#endif

void need(const char* op, const char* name, const Tensor& t, DType dtype, const Shape& shape) {
    CHECK(t.defined(), "%s: %s is undefined", op, name);
    CHECK(t.dtype == dtype, "%s: %s has dtype %s, expected %s", op, name, dtype_name(t.dtype), dtype_name(dtype));
    CHECK(t.shape == shape, "%s: %s has shape %s, expected %s", op, name, shape_str(t.shape).c_str(),
          shape_str(shape).c_str());
}
void need_f32(const char* op, const char* name, const Tensor& t, int dims) {
    CHECK(t.defined(), "%s: %s is undefined", op, name);
    CHECK(t.dtype == DType::f32, "%s: %s has dtype %s, expected f32", op, name, dtype_name(t.dtype));
    CHECK(t.dim() == dims, "%s: %s has shape %s, expected %d dims", op, name, shape_str(t.shape).c_str(), dims);
}
void same_device(const char* op, std::initializer_list<const Tensor*> ts) {
    const Tensor* first = nullptr;
    for (const Tensor* t : ts) {
        if (!t || !t->defined()) continue;
        if (!first) first = t;
        CHECK(t->device() == first->device(), "%s: operands on %s and %s", op, device_name(first->device()),
              device_name(t->device()));
    }
}

// the FLOP counter (ops.hpp): relaxed atomics, since a count needs no ordering with anything else
std::atomic<int64_t> g_linear_flops{0}, g_attention_flops{0};

// one attention call's GEMMs over the dense square: `gemms` products of (Tq, hd) by (hd, Tk) or alike per head
void count_attention_flops(const Tensor& q, const Tensor& k, int gemms) {
    const int64_t B = q.size(0), Tq = q.size(1), nh = q.size(2), hd = q.size(3), Tk = k.size(1);
    g_attention_flops.fetch_add(2 * gemms * B * nh * Tq * Tk * hd, std::memory_order_relaxed);
}

}  // namespace

FlopCount counted_flops() {
    return {g_linear_flops.load(std::memory_order_relaxed), g_attention_flops.load(std::memory_order_relaxed)};
}
void reset_counted_flops() {
    g_linear_flops.store(0, std::memory_order_relaxed);
    g_attention_flops.store(0, std::memory_order_relaxed);
}
void count_linear_flops(int64_t M, int64_t N, int64_t K) {
    g_linear_flops.fetch_add(2 * M * N * K, std::memory_order_relaxed);
}

void matmul(const Tensor& A, const Tensor& B, Tensor& C, bool transA, bool transB, float alpha, float beta) {
    CHECK(A.dim() >= 2 && B.dim() >= 2 && C.dim() >= 2, "matmul: A %s, B %s, C %s must be >= 2-D",
          shape_str(A.shape).c_str(), shape_str(B.shape).c_str(), shape_str(C.shape).c_str());
    CHECK(A.dtype == DType::f32 && B.dtype == DType::f32 && C.dtype == DType::f32, "matmul: f32 operands only");
    int64_t M = transA ? A.size(-1) : A.size(-2), K = transA ? A.size(-2) : A.size(-1);
    int64_t Kb = transB ? B.size(-1) : B.size(-2), N = transB ? B.size(-2) : B.size(-1);
    Shape batchA(A.shape.begin(), A.shape.end() - 2), batchB(B.shape.begin(), B.shape.end() - 2),
        batchC(C.shape.begin(), C.shape.end() - 2);
    CHECK(K == Kb && C.size(-2) == M && C.size(-1) == N && batchA == batchC &&
              (batchB.empty() || batchB == batchA),
          "matmul: shapes A %s%s, B %s%s, C %s do not fit", shape_str(A.shape).c_str(), transA ? "^T" : "",
          shape_str(B.shape).c_str(), transB ? "^T" : "", shape_str(C.shape).c_str());
    same_device("matmul", {&A, &B, &C});
    DISPATCH(A.device(), matmul, A, B, C, transA, transB, alpha, beta);
}

namespace {
bool g_tf32 = false;  // one thread launches every op of a rank
}
Tf32Scope::Tf32Scope(bool allow) : previous_(g_tf32) { g_tf32 = allow; }
Tf32Scope::~Tf32Scope() { g_tf32 = previous_; }
bool Tf32Scope::allowed() { return g_tf32; }

// the linear layers' GEMMs go through linear_gemm: plain matmul, or the precision policy's low-precision GEMM
// (linear_gemm.hpp), told which operand is the gradient (fp8 reads it in e5m2)
void linear_forward(const Tensor& x, const Tensor& W, Tensor& y) {
    linear_gemm(x, W, y, false, true, 0.0f, Operand::activation, Operand::weight);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor& dx, Tensor& dW) {
    if (dx.defined())  // (N, out) @ (out, in) -> (N, in)
        linear_gemm(dy, W, dx, false, false, 0.0f, Operand::gradient, Operand::weight);
    if (dW.defined())  // (out, N) @ (N, in) += (out, in)
        linear_gemm(dy, x, dW, true, false, 1.0f, Operand::gradient, Operand::activation);
}

void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out, int64_t vocab_start) {
    CHECK(tokens.dtype == DType::i32 && tokens.dim() == 1, "embedding: tokens must be (N) i32, got %s %s",
          dtype_name(tokens.dtype), shape_str(tokens.shape).c_str());
    need_f32("embedding", "table", table, 2);
    need("embedding", "out", out, DType::f32, {tokens.size(0), table.size(1)});
    same_device("embedding", {&tokens, &table, &out});
    DISPATCH(out.device(), embedding_forward, tokens, table, out, vocab_start);
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable, int64_t vocab_start) {
    CHECK(tokens.dtype == DType::i32 && tokens.dim() == 1, "embedding_backward: tokens must be (N) i32");
    need_f32("embedding_backward", "dtable", dtable, 2);
    need("embedding_backward", "dout", dout, DType::f32, {tokens.size(0), dtable.size(1)});
    same_device("embedding_backward", {&tokens, &dout, &dtable});
    DISPATCH(dout.device(), embedding_backward, tokens, dout, dtable, vocab_start);
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd, float eps) {
    need_f32("rmsnorm", "x", x, 2);
    need("rmsnorm", "w", w, DType::f32, {x.size(1)});
    need("rmsnorm", "y", y, DType::f32, x.shape);
    need("rmsnorm", "rstd", rstd, DType::f32, {x.size(0)});
    same_device("rmsnorm", {&x, &w, &y, &rstd});
    DISPATCH(x.device(), rmsnorm_forward, x, w, y, rstd, eps);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw) {
    need_f32("rmsnorm_backward", "x", x, 2);
    need("rmsnorm_backward", "dy", dy, DType::f32, x.shape);
    need("rmsnorm_backward", "rstd", rstd, DType::f32, {x.size(0)});
    CHECK(dx.defined() || dw.defined(), "rmsnorm_backward: neither dx nor dw is wanted");
    if (dx.defined()) {  // the input gradient reads the weight; the weight gradient does not
        need("rmsnorm_backward", "w", w, DType::f32, {x.size(1)});
        need("rmsnorm_backward", "dx", dx, DType::f32, x.shape);
    }
    if (dw.defined()) need("rmsnorm_backward", "dw", dw, DType::f32, {x.size(1)});
    same_device("rmsnorm_backward", {&dy, &x, &w, &rstd, &dx, &dw});
    DISPATCH(x.device(), rmsnorm_backward, dy, x, w, rstd, dx, dw);
}

static void check_rope(const char* op, const Tensor& x, const Tensor& pos, const Tensor& inv_freq,
                       const Tensor& out) {
    need_f32(op, "x", x, 4);
    CHECK(x.size(3) % 2 == 0, "%s: head dim %ld must be even", op, (long)x.size(3));
    need(op, "pos", pos, DType::i32, {x.size(1)});
    need(op, "inv_freq", inv_freq, DType::f32, {x.size(3) / 2});
    need(op, "out", out, DType::f32, x.shape);
    same_device(op, {&x, &pos, &inv_freq, &out});
}

void rope_forward(const Tensor& x, const Tensor& pos, const Tensor& inv_freq, Tensor& out) {
    check_rope("rope", x, pos, inv_freq, out);
    DISPATCH(x.device(), rope_forward, x, pos, inv_freq, out);
}

void rope_backward(const Tensor& dout, const Tensor& pos, const Tensor& inv_freq, Tensor& dx) {
    check_rope("rope_backward", dout, pos, inv_freq, dx);
    DISPATCH(dout.device(), rope_backward, dout, pos, inv_freq, dx);
}

// q, k, v, out share one dtype: f32 on every device; bf16 / f16 (the tiled kernels on a GPU's tensor
// cores) when `low_precision`. lse is f32 always.
static void check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& out, const Tensor& lse, bool low_precision = false) {
    CHECK(q.defined() && k.defined(), "%s: q or k is undefined", op);
    const DType t = q.dtype;
    if (t != DType::f32) {
        CHECK(low_precision && (t == DType::bf16 || t == DType::f16),
              "%s: q is %s; this attention takes f32%s", op, dtype_name(t),
              low_precision ? ", bf16 or f16" : " (bf16 / f16: the tiled kernels, on CUDA)");
        CHECK(q.device() == Device::cuda, "%s: %s attention runs on the GPU's tensor cores; the CPU reference "
              "takes f32 (convert q, k, v first)", op, dtype_name(t));
    }
    CHECK(q.dim() == 4 && k.dim() == 4, "%s: q %s and k %s must be (B, T, heads, head dim)", op,
          shape_str(q.shape).c_str(), shape_str(k.shape).c_str());
    int64_t B = q.size(0), Tq = q.size(1), nh = q.size(2), hd = q.size(3), nkv = k.size(2);
    CHECK(k.dtype == t, "%s: k has dtype %s, q %s", op, dtype_name(k.dtype), dtype_name(t));
    CHECK(k.size(0) == B && k.size(3) == hd, "%s: k %s does not fit q %s", op, shape_str(k.shape).c_str(),
          shape_str(q.shape).c_str());
    CHECK(nkv > 0 && nh % nkv == 0, "%s: query heads %ld must be a multiple of kv heads %ld", op, (long)nh,
          (long)nkv);
    need(op, "v", v, t, k.shape);
    need(op, "out", out, t, q.shape);
    need(op, "lse", lse, DType::f32, {B, nh, Tq});
    same_device(op, {&q, &k, &v, &out, &lse});
}

// the gradients have q's dtype (accumulated in it)
static void check_attention_grads(const char* op, const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& dq, const Tensor& dk, const Tensor& dv) {
    need(op, "dout", dout, q.dtype, q.shape);
    need(op, "dq", dq, q.dtype, q.shape);
    need(op, "dk", dk, q.dtype, k.shape);
    need(op, "dv", dv, q.dtype, k.shape);
    same_device(op, {&dout, &q, &dq, &dk, &dv});
}

void attention_forward_naive(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                             Tensor* probs, AttnSpan span) {
    check_attention("attention_naive", q, k, v, out, lse);
    if (probs) need("attention_naive", "probs", *probs, DType::f32, {q.size(0), q.size(2), q.size(1), k.size(1)});
    count_attention_flops(q, k, 2);  // Q·Kᵀ, P·V
    DISPATCH(q.device(), attention_forward_naive, q, k, v, out, lse, probs, span);
}

void attention_backward_naive(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor* probs, Tensor& dq,
                              Tensor& dk, Tensor& dv, AttnSpan span) {
    check_attention("attention_backward_naive", q, k, v, out, lse);
    check_attention_grads("attention_backward_naive", dout, q, k, dq, dk, dv);
    if (probs)
        need("attention_backward_naive", "probs", *probs, DType::f32, {q.size(0), q.size(2), q.size(1), k.size(1)});
    count_attention_flops(q, k, probs ? 4 : 5);  // dV, dP, dQ, dK; Q·Kᵀ again to rebuild P without saved ones
    DISPATCH(q.device(), attention_backward_naive, dout, q, k, v, out, lse, probs, dq, dk, dv, span);
}

void attention_forward_tiled(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                             AttnSpan span) {
    check_attention("attention_tiled", q, k, v, out, lse, true);
    count_attention_flops(q, k, 2);  // Q·Kᵀ, P·V (a causal kernel skips the future tiles: counted dense all the same)
    DISPATCH(q.device(), attention_forward_tiled, q, k, v, out, lse, span);
}

void attention_backward_tiled(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv,
                              AttnSpan span) {
    check_attention("attention_backward_tiled", q, k, v, out, lse, true);
    check_attention_grads("attention_backward_tiled", dout, q, k, dq, dk, dv);
    count_attention_flops(q, k, 5);  // Q·Kᵀ to rebuild P, then dV, dP, dQ, dK
    DISPATCH(q.device(), attention_backward_tiled, dout, q, k, v, out, lse, dq, dk, dv, span);
}

void check_attention_merge(const Tensor& out, const Tensor& lse, const Tensor& out_part, const Tensor& lse_part) {
    need_f32("attention_merge", "out", out, 4);
    need("attention_merge", "lse", lse, DType::f32, {out.size(0), out.size(2), out.size(1)});
    need("attention_merge", "out_part", out_part, DType::f32, out.shape);
    need("attention_merge", "lse_part", lse_part, DType::f32, lse.shape);
    same_device("attention_merge", {&out, &lse, &out_part, &lse_part});
}

void attention_merge_gpu(Tensor& out, Tensor& lse, const Tensor& out_part, const Tensor& lse_part) {
    check_attention_merge(out, lse, out_part, lse_part);
    CHECK(out.device() == Device::cuda, "attention_merge_gpu: operands on %s; the CPU merge is chapter 06's "
          "online_softmax_merge", device_name(out.device()));
#if defined(PENTA_CUDA)
    cuda::attention_merge(out, lse, out_part, lse_part);
#else
    FAIL("attention_merge on a cuda tensor, but this build has no CUDA (make CUDA=1)");
#endif
}

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) {
    CHECK(gate.dtype == DType::f32, "swiglu: gate must be f32");
    need("swiglu", "up", up, DType::f32, gate.shape);
    need("swiglu", "out", out, DType::f32, gate.shape);
    same_device("swiglu", {&gate, &up, &out});
    DISPATCH(gate.device(), swiglu_forward, gate, up, out);
}

void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) {
    CHECK(gate.dtype == DType::f32, "swiglu_backward: gate must be f32");
    for (auto* t : {&dout, &up, (const Tensor*)&dgate, (const Tensor*)&dup})
        need("swiglu_backward", "operand", *t, DType::f32, gate.shape);
    same_device("swiglu_backward", {&dout, &gate, &up, &dgate, &dup});
    DISPATCH(gate.device(), swiglu_backward, dout, gate, up, dgate, dup);
}

namespace {
// the routing of N rows to k experts: experts or pos (N, k) i32, weights (N, k) f32
void need_choices(const char* op, const char* name, const Tensor& t, DType dtype, int64_t N, int64_t k = -1) {
    CHECK(t.defined() && t.dtype == dtype && t.dim() == 2 && t.size(0) == N && (k < 0 || t.size(1) == k),
          "%s: %s must be (%lld, %s) %s, got %s %s", op, name, (long long)N, k < 0 ? "k" : std::to_string(k).c_str(),
          dtype_name(dtype), t.defined() ? dtype_name(t.dtype) : "undefined", t.defined() ? shape_str(t.shape).c_str() : "");
}
}  // namespace

void moe_router_forward(const Tensor& logits, const Tensor& bias, bool sigmoid, bool normalize, Tensor& scores,
                        Tensor& experts, Tensor& weights) {
    need_f32("moe_router", "logits", logits, 2);
    const int64_t N = logits.size(0), E = logits.size(1);
    if (bias.defined()) need("moe_router", "bias", bias, DType::f32, {E});
    need("moe_router", "scores", scores, DType::f32, logits.shape);
    need_choices("moe_router", "experts", experts, DType::i32, N);
    const int64_t k = experts.size(1);
    CHECK(k >= 1 && k <= E, "moe_router: k %lld must be in [1, E %lld]", (long long)k, (long long)E);
    need_choices("moe_router", "weights", weights, DType::f32, N, k);
    same_device("moe_router", {&logits, &bias, &scores, &experts, &weights});
    DISPATCH(logits.device(), moe_router_forward, logits, bias, sigmoid, normalize, scores, experts, weights);
}

void moe_router_backward(const Tensor& dweights, const Tensor& scores, const Tensor& experts,
                         const Tensor& aux_dscores, bool sigmoid, bool normalize, Tensor& dlogits) {
    need_f32("moe_router_backward", "scores", scores, 2);
    const int64_t N = scores.size(0), E = scores.size(1);
    need_choices("moe_router_backward", "experts", experts, DType::i32, N);
    need_choices("moe_router_backward", "dweights", dweights, DType::f32, N, experts.size(1));
    if (aux_dscores.defined()) {
        need_f32("moe_router_backward", "aux_dscores", aux_dscores, 2);
        CHECK(aux_dscores.size(1) == E && aux_dscores.size(0) > 0 && N % aux_dscores.size(0) == 0,
              "moe_router_backward: aux_dscores %s must be (B, %lld) with B dividing the %lld rows",
              shape_str(aux_dscores.shape).c_str(), (long long)E, (long long)N);
    }
    need("moe_router_backward", "dlogits", dlogits, DType::f32, scores.shape);
    same_device("moe_router_backward", {&dweights, &scores, &experts, &aux_dscores, &dlogits});
    DISPATCH(scores.device(), moe_router_backward, dweights, scores, experts, aux_dscores, sigmoid, normalize, dlogits);
}

void moe_sequence_stats(const Tensor& scores, const Tensor& experts, Tensor& counts, Tensor& score_sums) {
    need_f32("moe_sequence_stats", "scores", scores, 2);
    const int64_t N = scores.size(0), E = scores.size(1);
    need_choices("moe_sequence_stats", "experts", experts, DType::i32, N);
    need_f32("moe_sequence_stats", "counts", counts, 2);
    const int64_t B = counts.size(0);
    CHECK(B > 0 && N % B == 0 && counts.size(1) == E, "moe_sequence_stats: counts %s must be (B, %lld) with B dividing "
          "the %lld rows", shape_str(counts.shape).c_str(), (long long)E, (long long)N);
    need("moe_sequence_stats", "score_sums", score_sums, DType::f32, counts.shape);
    same_device("moe_sequence_stats", {&scores, &experts, &counts, &score_sums});
    DISPATCH(scores.device(), moe_sequence_stats, scores, experts, counts, score_sums);
}

void moe_dispatch(const Tensor& x, const Tensor& pos, Tensor& out) {
    need_f32("moe_dispatch", "x", x, 2);
    need_choices("moe_dispatch", "pos", pos, DType::i32, x.size(0));
    need_f32("moe_dispatch", "out", out, 2);
    CHECK(out.size(1) == x.size(1), "moe_dispatch: out %s and x %s differ in width", shape_str(out.shape).c_str(),
          shape_str(x.shape).c_str());
    same_device("moe_dispatch", {&x, &pos, &out});
    DISPATCH(x.device(), moe_dispatch, x, pos, out);
}

void moe_dispatch_backward(const Tensor& dout, const Tensor& pos, Tensor& dx) {
    need_f32("moe_dispatch_backward", "dout", dout, 2);
    need_f32("moe_dispatch_backward", "dx", dx, 2);
    need_choices("moe_dispatch_backward", "pos", pos, DType::i32, dx.size(0));
    CHECK(dout.size(1) == dx.size(1), "moe_dispatch_backward: dout %s and dx %s differ in width",
          shape_str(dout.shape).c_str(), shape_str(dx.shape).c_str());
    same_device("moe_dispatch_backward", {&dout, &pos, &dx});
    DISPATCH(dx.device(), moe_dispatch_backward, dout, pos, dx);
}

void moe_combine(const Tensor& expert_out, const Tensor& pos, const Tensor& weights, Tensor& y) {
    need_f32("moe_combine", "expert_out", expert_out, 2);
    need_f32("moe_combine", "y", y, 2);
    need_choices("moe_combine", "pos", pos, DType::i32, y.size(0));
    need("moe_combine", "weights", weights, DType::f32, pos.shape);
    CHECK(expert_out.size(1) == y.size(1), "moe_combine: expert_out %s and y %s differ in width",
          shape_str(expert_out.shape).c_str(), shape_str(y.shape).c_str());
    same_device("moe_combine", {&expert_out, &pos, &weights, &y});
    DISPATCH(y.device(), moe_combine, expert_out, pos, weights, y);
}

void moe_combine_backward(const Tensor& dy, const Tensor& expert_out, const Tensor& pos, const Tensor& weights,
                          Tensor& d_expert_out, Tensor& dweights) {
    need_f32("moe_combine_backward", "dy", dy, 2);
    need_f32("moe_combine_backward", "expert_out", expert_out, 2);
    need_choices("moe_combine_backward", "pos", pos, DType::i32, dy.size(0));
    need("moe_combine_backward", "weights", weights, DType::f32, pos.shape);
    need("moe_combine_backward", "d_expert_out", d_expert_out, DType::f32, expert_out.shape);
    need("moe_combine_backward", "dweights", dweights, DType::f32, pos.shape);
    CHECK(expert_out.size(1) == dy.size(1), "moe_combine_backward: expert_out %s and dy %s differ in width",
          shape_str(expert_out.shape).c_str(), shape_str(dy.shape).c_str());
    same_device("moe_combine_backward", {&dy, &expert_out, &pos, &weights, &d_expert_out, &dweights});
    DISPATCH(dy.device(), moe_combine_backward, dy, expert_out, pos, weights, d_expert_out, dweights);
}

double cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, Tensor& dlogits,
                                      float grad_scale, int32_t ignore_index, Tensor& losses) {
    need_f32("cross_entropy", "logits", logits, 2);
    need("cross_entropy", "targets", targets, DType::i32, {logits.size(0)});
    if (dlogits.defined()) need("cross_entropy", "dlogits", dlogits, DType::f32, logits.shape);
    if (losses.defined()) need("cross_entropy", "losses", losses, DType::f32, {logits.size(0)});
    same_device("cross_entropy", {&logits, &targets, &dlogits, &losses});
    return DISPATCH(logits.device(), cross_entropy_forward_backward, logits, targets, dlogits, grad_scale,
                    ignore_index, losses);
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& cfg, int step,
                float grad_scale) {
    CHECK(step >= 1, "adamw_step: step %d must count from 1", step);
    for (auto* t : {(const Tensor*)&param, &grad, (const Tensor*)&m, (const Tensor*)&v}) {
        CHECK(t->dtype == DType::f32, "adamw_step: operands must be f32");
        CHECK(t->numel() == param.numel(), "adamw_step: %ld vs %ld elements", (long)t->numel(), (long)param.numel());
    }
    same_device("adamw_step", {&param, &grad, &m, &v});
    DISPATCH(param.device(), adamw_step, param, grad, m, v, cfg, step, grad_scale);
}

double sum_squares(const Tensor& x) {
    CHECK(x.dtype == DType::f32, "sum_squares: f32 only, got %s", dtype_name(x.dtype));
    return DISPATCH(x.device(), sum_squares, x);
}

double sum_squares(const std::vector<Tensor>& xs) {
    if (xs.empty()) return 0.0;
    for (const Tensor& x : xs) {
        CHECK(x.dtype == DType::f32, "sum_squares: f32 only, got %s", dtype_name(x.dtype));
        CHECK(x.device() == xs[0].device(), "sum_squares: tensors on %s and %s", device_name(xs[0].device()),
              device_name(x.device()));
    }
    return DISPATCH(xs[0].device(), sum_squares, xs);
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
    need("add", "b", b, DType::f32, a.shape);
    need("add", "out", out, DType::f32, a.shape);
    same_device("add", {&a, &b, &out});
    DISPATCH(a.device(), add, a, b, out);
}

void add_inplace(Tensor& dst, const Tensor& src, float alpha) {
    CHECK(dst.dtype == DType::f32 && src.dtype == DType::f32 && dst.numel() == src.numel(),
          "add_inplace: dst %s %s, src %s %s", dtype_name(dst.dtype), shape_str(dst.shape).c_str(),
          dtype_name(src.dtype), shape_str(src.shape).c_str());
    same_device("add_inplace", {&dst, &src});
    DISPATCH(dst.device(), add_inplace, dst, src, alpha);
}

void scale_inplace(Tensor& x, float s) {
    CHECK(x.dtype == DType::f32, "scale_inplace: f32 only");
    DISPATCH(x.device(), scale_inplace, x, s);
}

void fill(Tensor& x, float value) { DISPATCH(x.device(), fill, x, value); }

void copy(Tensor& dst, const Tensor& src) {
    CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(), "copy: dst %s %s, src %s %s",
          dtype_name(dst.dtype), shape_str(dst.shape).c_str(), dtype_name(src.dtype), shape_str(src.shape).c_str());
    if (dst.device() == Device::cpu && src.device() == Device::cpu) {
        std::memmove(dst.data(), src.data(), src.nbytes());
        return;
    }
#if defined(PENTA_CUDA)
    if (src.device() == Device::cpu) cuda::copy_to_device(dst.data(), src.data(), src.nbytes());
    else if (dst.device() == Device::cpu) cuda::copy_to_host(dst.data(), src.data(), src.nbytes());
    else cuda::copy_on_device(dst.data(), src.data(), src.nbytes());
#else
    FAIL("copy to or from a cuda tensor, but this build has no CUDA (make CUDA=1)");
#endif
}

void convert(Tensor& dst, const Tensor& src) {
    CHECK(dst.numel() == src.numel(), "convert: %ld vs %ld elements", (long)dst.numel(), (long)src.numel());
    CHECK(dst.dtype != DType::i32 && src.dtype != DType::i32, "convert: float dtypes only");
    CHECK(dst.dtype == DType::f32 || src.dtype == DType::f32, "convert: %s -> %s; one side must be f32",
          dtype_name(src.dtype), dtype_name(dst.dtype));
    same_device("convert", {&dst, &src});
    DISPATCH(dst.device(), convert, dst, src);
}

void init_normal(Tensor& x, uint64_t seed, uint64_t stream, float std, int64_t row0, int64_t col0,
                 int64_t full_cols) {
    CHECK(x.dtype == DType::f32, "init_normal: f32 only");
    DISPATCH(x.device(), init_normal, x, seed, stream, std, row0, col0, full_cols);
}

void device_synchronize(Device d) {
    if (d == Device::cuda) DISPATCH(d, device_synchronize);
}

}  // namespace penta
