// comm.cpp — what both backends share: op names, the ring byte accounting, counters, backend choice.
// See comm.hpp. The collectives themselves are in comm_mpi.cpp and cuda/comm_nccl.cu.
#include "comm.hpp"

#include "core.hpp"
#include "ops.hpp"
#include "runtime.hpp"

namespace penta {

const char* comm_op_name(CommOp op) {
    static const char* names[kNumCommOps] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                             "send",       "recv",           "all_to_all", "barrier"};
    return names[(int)op];
}

const char* comm_backend_name(CommBackend b) { return b == CommBackend::nccl ? "nccl" : "mpi"; }

CommBackend parse_comm_backend(const std::string& v, Device device) {
    if (v == "mpi") return CommBackend::mpi;
    if (v == "nccl") {
#if defined(PENTA_NCCL)
        CHECK(device == Device::cuda, "--comm nccl needs --device cuda (NCCL moves GPU memory only)");
        return CommBackend::nccl;
#else
        FAIL("--comm nccl: this build has no NCCL (build with CUDA=1)");
#endif
    }
    CHECK(v == "auto", "--comm %s must be auto, mpi or nccl", v.c_str());
#if defined(PENTA_NCCL)
    if (device == Device::cuda) return CommBackend::nccl;
#endif
    return CommBackend::mpi;
}

// The ring algorithm: an all-reduce is a reduce-scatter then an all-gather, each moving K-1 of the K
// parts through every rank. Broadcast and send move the buffer once; all-to-all keeps 1/K at home.
double ring_bytes(CommOp op, int K, double M) {
    if (K <= 1) return op == CommOp::send ? M : 0.0;  // recv is never counted (see below)
    const double f = double(K - 1) / K;
    switch (op) {
        case CommOp::all_reduce: return 2 * f * M;
        case CommOp::reduce_scatter:
        case CommOp::all_gather:
        case CommOp::all_to_all: return f * M;
        case CommOp::broadcast:
        case CommOp::send: return M;
        case CommOp::recv:  // received bytes are the sender's; counting them again would double the total
        case CommOp::barrier: return 0.0;
    }
    return 0.0;
}

CommHandle Comm::all_to_all_async(const Tensor& in, Tensor& out) {
    CHECK(in.numel() == out.numel() && in.numel() % size_ == 0,
          "all_to_all: in (%lld) and out (%lld) must have the same numel, divisible by the group size %d",
          (long long)in.numel(), (long long)out.numel(), size_);
    const int64_t c = in.numel() / size_;
    std::vector<int64_t> counts(size_, c), offs(size_);
    for (int r = 0; r < size_; r++) offs[r] = r * c;
    return all_to_all_v_async(in, counts, offs, out, counts, offs);
}

std::vector<double> Comm::all_gather_scalar(double x) {
    std::vector<double> all(size_);
    for (int r = 0; r < size_; r++) all[r] = all_reduce_scalar(rank_ == r ? x : 0.0);
    return all;
}

void Comm::check_part(const Tensor& whole, const Tensor& part, const char* what) const {
    CHECK(whole.dtype == part.dtype, "%s: the whole is %s, the part %s", what, dtype_name(whole.dtype),
          dtype_name(part.dtype));
    const int64_t M = whole.numel(), want = part_count(M, size_, rank_);
    CHECK(part.numel() == want, "%s on %s: rank %d's part of %lld elements over %d ranks has %lld elements, got %lld",
          what, name_.c_str(), rank_, (long long)M, size_, (long long)want, (long long)part.numel());
}

void Comm::check_peer(int peer, const char* what) const {
    CHECK(peer >= 0 && peer < size_, "%s %d is not a rank of %s (size %d)", what, peer, name_.c_str(), size_);
}

double Comm::check_all_to_all_v(const Tensor& in, const std::vector<int64_t>& sc, const std::vector<int64_t>& so,
                                const Tensor& out, const std::vector<int64_t>& rc,
                                const std::vector<int64_t>& ro) const {
    CHECK((int)sc.size() == size_ && (int)so.size() == size_ && (int)rc.size() == size_ && (int)ro.size() == size_,
          "all_to_all_v: counts and offsets need %d entries each (the group size)", size_);
    CHECK(in.dtype == out.dtype, "all_to_all_v: in is %s, out is %s", dtype_name(in.dtype), dtype_name(out.dtype));
    double sent = 0;
    for (int r = 0; r < size_; r++) {
        CHECK(sc[r] >= 0 && so[r] >= 0 && so[r] + sc[r] <= in.numel(),
              "all_to_all_v: send part %d [%lld, +%lld) is outside the input (%lld elements)", r, (long long)so[r],
              (long long)sc[r], (long long)in.numel());
        CHECK(rc[r] >= 0 && ro[r] >= 0 && ro[r] + rc[r] <= out.numel(),
              "all_to_all_v: receive part %d [%lld, +%lld) is outside the output (%lld elements)", r, (long long)ro[r],
              (long long)rc[r], (long long)out.numel());
        if (r != rank_) sent += (double)sc[r] * dtype_size(in.dtype);
    }
    return sent;
}

double CommCounters::total_bytes() const {
    double s = 0;
    for (double b : bytes) s += b;
    return s;
}

int64_t CommCounters::total_calls() const {
    int64_t s = 0;
    for (int64_t c : calls) s += c;
    return s;
}

CommCounters CommCounters::operator-(const CommCounters& o) const {
    CommCounters d;
    for (int i = 0; i < kNumCommOps; i++) {
        d.calls[i] = calls[i] - o.calls[i];
        d.bytes[i] = bytes[i] - o.bytes[i];
    }
    d.scalar_reductions = scalar_reductions - o.scalar_reductions;
    return d;
}

namespace {

// The group of one rank (a build without MPI, or a parallel axis of size 1): every collective is a copy or
// nothing. Calls are counted, bytes are not (nothing leaves the rank), as the MPI backend counts a group
// of one, so a chapter's counters read the same in an MPI=0 build.
class SelfComm : public Comm {
   public:
    explicit SelfComm(std::string name) { name_ = std::move(name); }
    CommBackend backend() const override { return CommBackend::mpi; }
    CommHandle all_reduce_async(Tensor& x, ReduceOp) override {
        record(CommOp::all_reduce, (double)x.nbytes());
        return {};
    }
    CommHandle reduce_scatter_async(const Tensor& in, Tensor& out) override {
        return copy_all(CommOp::reduce_scatter, in, out);
    }
    CommHandle all_gather_async(const Tensor& in, Tensor& out) override { return copy_all(CommOp::all_gather, in, out); }
    CommHandle broadcast_async(Tensor& x, int root) override {
        check_peer(root, "broadcast root");
        record(CommOp::broadcast, (double)x.nbytes());
        return {};
    }
    CommHandle send_async(const Tensor&, int peer, int) override { FAIL("send to %d on a group of one rank", peer); }
    CommHandle recv_async(Tensor&, int peer, int) override { FAIL("recv from %d on a group of one rank", peer); }
    CommHandle all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& sc, const std::vector<int64_t>& so,
                                  Tensor& out, const std::vector<int64_t>& rc, const std::vector<int64_t>& ro) override {
        check_all_to_all_v(in, sc, so, out, rc, ro);
        CHECK(sc[0] == rc[0], "all_to_all_v on one rank: send count %lld != receive count %lld", (long long)sc[0],
              (long long)rc[0]);
        Tensor dst = out.flat(ro[0], rc[0]);
        copy(dst, in.flat(so[0], sc[0]));
        record(CommOp::all_to_all, 0.0);
        return {};
    }
    void barrier() override { record(CommOp::barrier, 0.0); }
    double reduce_scalar(double x, ReduceOp) override { return x; }
    std::unique_ptr<Comm> split(int, int, const std::string& name) override { return std::make_unique<SelfComm>(name); }

   private:
    CommHandle copy_all(CommOp op, const Tensor& in, Tensor& out) {
        CHECK(in.numel() == out.numel(), "%s on one rank: the part is the whole: in %lld vs out %lld elements",
              comm_op_name(op), (long long)in.numel(), (long long)out.numel());
        if (in.data() != out.data()) {  // in place (the part is a view of the whole) is already done
            Tensor o = out.flat(0, out.numel());
            copy(o, in.flat(0, in.numel()));
        }
        record(op, (double)out.nbytes());
        return {};
    }
};

}  // namespace

std::unique_ptr<Comm> make_mpi_world_comm();   // comm_mpi.cpp
std::unique_ptr<Comm> make_nccl_world_comm();  // cuda/comm_nccl.cu

std::unique_ptr<Comm> make_self_comm(const std::string& name) { return std::make_unique<SelfComm>(name); }

std::unique_ptr<Comm> make_world_comm(CommBackend backend) {
    if (backend == CommBackend::nccl) {
#if defined(PENTA_NCCL)
        return make_nccl_world_comm();
#else
        FAIL("the NCCL backend is not built in (build with CUDA=1)");
#endif
    }
#if defined(PENTA_MPI)
    if (mpi_enabled()) return make_mpi_world_comm();
#endif
    return make_self_comm("world");
}

// ---- rooted collectives: reduce, gather, scatter from send / recv ---------------------------------------
// The simplest algorithm for each: the root talks to every other rank in turn (K - 1 messages, the root's
// link carries them all). NCCL and MPI have tree and pipelined versions; nothing here is on a hot path.

namespace {
constexpr int kRootedTag = 7301;  // apart from the pipeline's and the ring's tags
}

void Comm::reduce(const Tensor& in, Tensor& out, int root) {
    check_peer(root, "reduce: root");
    CHECK(in.dtype == DType::f32, "reduce on %s: rank %d's input is %s; the sum is taken in f32 only", name_.c_str(),
          rank_, dtype_name(in.dtype));
    if (rank_ != root) {
        send(in, root, kRootedTag);
        return;
    }
    CHECK(out.dtype == in.dtype && out.numel() == in.numel(),
          "reduce on %s: the root's output has %lld %s elements, the input %lld %s", name_.c_str(),
          (long long)out.numel(), dtype_name(out.dtype), (long long)in.numel(), dtype_name(in.dtype));
    // out = in_0 + in_1 + ... in rank order, whatever the root: the same bits on any root
    Tensor incoming = Tensor::empty({in.numel()}, in.dtype, in.device(), Tag::comm);  // (M)
    Tensor mine = in.clone(in.device(), Tag::comm);  // (M); the root's out may alias its in
    for (int q = 0; q < size_; q++) {
        if (q == root) {
            copy(incoming, mine);
        } else {
            recv(incoming, q, kRootedTag);
        }
        if (q == 0) {
            copy(out, incoming);
        } else {
            add_inplace(out, incoming);
        }
    }
}

void Comm::gather(const Tensor& in, Tensor& out, int root) {
    check_peer(root, "gather: root");
    if (rank_ != root) {
        send(in, root, kRootedTag);
        return;
    }
    check_part(out, in, "gather");
    const int64_t M = out.numel();
    for (int q = 0; q < size_; q++) {
        Tensor part = out.flat(part_start(M, size_, q), part_count(M, size_, q));
        if (q == root) {
            copy(part, in);
        } else {
            recv(part, q, kRootedTag);
        }
    }
}

void Comm::scatter(const Tensor& in, Tensor& out, int root) {
    check_peer(root, "scatter: root");
    if (rank_ != root) {
        recv(out, root, kRootedTag);
        return;
    }
    check_part(in, out, "scatter");
    const int64_t M = in.numel();
    for (int q = 0; q < size_; q++) {
        const Tensor part = in.flat(part_start(M, size_, q), part_count(M, size_, q));
        if (q == root) {
            copy(out, part);
        } else {
            send(part, q, kRootedTag);
        }
    }
}

}  // namespace penta
