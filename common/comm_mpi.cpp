// comm_mpi.cpp — the MPI backend of Comm (comm.hpp), and the one-rank Comm of a build without MPI.
//
// Every collective is MPI's non-blocking form (MPI_Iallreduce, ...): *_async starts it and the handle's
// wait() is MPI_Waitall. MPI moves host memory, so a tensor on a GPU is staged: copied to a host buffer
// (Tag::comm, so the memory table shows it) when the operation starts and back when it is waited on.
// That is slow but lets several ranks share one GPU, and lets every chapter run on plain CPU ranks.
// Open MPI progresses a non-blocking collective only inside MPI calls; CommHandle::test() is such a
// call, and ch02's bucketed gradient sink makes it between layers so buckets move while backward runs.
// Element counts are ints in MPI 3: one buffer is limited to 2^31-1 elements (8 GiB of f32), checked.
// Every blocking wait (a handle's wait(), the barrier, the scalar all-reduce) polls under the watchdog's
// deadline (watchdog.hpp: --comm-timeout), so a rank that never arrives aborts the job with a report.
#include "comm.hpp"

#if defined(PENTA_MPI)
#include <climits>

#include "ops.hpp"
#include "runtime.hpp"
#include "watchdog.hpp"

namespace penta {

namespace {

// A tensor as MPI sees it: the host tensor itself, or a host copy of a device tensor.
struct Staged {
    Tensor user, host;
    Staged(const Tensor& t, bool copy_in) : user(t) {
        if (t.device() == Device::cpu) {
            host = t;
        } else {
            host = Tensor::empty(t.shape, t.dtype, Device::cpu, Tag::comm);
            if (copy_in) copy(host, t);
        }
    }
    void copy_out() {
        if (user.device() != Device::cpu) copy(user, host);
    }
};

// MPI forbids a collective's input and output to overlap (MPICH checks it: "Buffers must not be
// aliased"; Open MPI 4.1 happens to tolerate it), but ZeRO keeps a rank's shard inside the full flat
// buffer: all-gather from a view of the output (done with MPI_IN_PLACE, no copy) and reduce-scatter into
// a view of the input. The input that MPI reads: the host tensor itself, a host copy of a device tensor,
// or, when it overlaps the output, a copy set aside (Tag::comm, so the memory table shows its cost).
Tensor input_buffer(const Tensor& in, const Tensor& out) {
    const bool overlap = in.buf == out.buf && in.device() == Device::cpu &&
                         (const char*)in.data() < (const char*)out.data() + out.nbytes() &&
                         (const char*)out.data() < (const char*)in.data() + in.nbytes();
    return overlap ? in.clone(Device::cpu, Tag::comm) : Staged(in, true).host;
}

// Who a group is, for the watchdog's report: its name and its members' world ranks (group order).
struct GroupInfo {
    std::string name;
    std::vector<int> world_ranks;
};

// Waits for reqs under the watchdog's deadline (watchdog.hpp): MPI_Testall polled, not MPI_Waitall, which
// would wait forever for a rank that never arrives. peer: the world rank of a send/recv's peer, or -1.
void wait_requests(std::vector<MPI_Request>& reqs, CommOp op, const std::shared_ptr<const GroupInfo>& group,
                   int peer) {
    if (reqs.empty()) return;
    wait_until(
        [&] {
            int flag = 0;
            MPI_CHECK(MPI_Testall((int)reqs.size(), reqs.data(), &flag, MPI_STATUSES_IGNORE));
            return flag != 0;
        },
        [&] {
            const std::string on = strfmt("on group %s (%s)", group->name.c_str(),
                                          group_members_str(group->world_ranks).c_str());
            if (op == CommOp::send) return strfmt("send to rank %d %s", peer, on.c_str());
            if (op == CommOp::recv) return strfmt("recv from rank %d %s", peer, on.c_str());
            return strfmt("%s %s", comm_op_name(op), on.c_str());
        });
}

// The state of one in-flight operation: requests, the buffers they use, and the count arrays MPI reads
// until completion (the non-blocking vector collectives keep pointers to them).
struct MpiPending : CommHandle::Pending {
    std::vector<MPI_Request> reqs;
    std::vector<Staged> outputs;  // copied back to the device when complete
    std::vector<Tensor> keep;     // staged inputs
    std::vector<int> counts, displs, counts2, displs2;
    bool finished = false;
    CommOp op = CommOp::barrier;  // what it is, for the watchdog's report
    std::shared_ptr<const GroupInfo> group;
    int peer = -1;                // world rank of a send/recv's peer
    MpiPending(CommOp o, std::shared_ptr<const GroupInfo> g, int world_peer = -1)
        : op(o), group(std::move(g)), peer(world_peer) {}
    void finish() {
        if (finished) return;
        for (auto& s : outputs) s.copy_out();
        finished = true;
    }
    void wait() override {
        wait_requests(reqs, op, group, peer);
        finish();
    }
    bool test() override {
        int flag = 1;
        if (!reqs.empty()) MPI_CHECK(MPI_Testall((int)reqs.size(), reqs.data(), &flag, MPI_STATUSES_IGNORE));
        if (flag) finish();
        return flag != 0;
    }
};

int to_int(int64_t n, const char* what) {
    CHECK(n >= 0 && n <= INT_MAX, "%s: %lld elements exceed MPI's int count (2^31-1); use NCCL or split the buffer",
          what, (long long)n);
    return (int)n;
}

MPI_Datatype mpi_type(DType t, bool reducing) {
    switch (t) {
        case DType::f32: return MPI_FLOAT;
        case DType::i32: return MPI_INT;
        default: break;
    }
    CHECK(!reducing, "the MPI backend reduces f32 or i32 only, not %s (reduce in f32, as mixed precision does)",
          dtype_name(t));
    return dtype_size(t) == 2 ? MPI_UINT16_T : MPI_UINT8_T;
}

class MpiComm : public Comm {
   public:
    MpiComm(MPI_Comm c, std::string name) : comm_(c) {
        MPI_CHECK(MPI_Comm_rank(c, &rank_));
        MPI_CHECK(MPI_Comm_size(c, &size_));
        name_ = std::move(name);
        // the members' world ranks, once, for the watchdog's reports
        auto info = std::make_shared<GroupInfo>();
        info->name = name_;
        MPI_Group mine, world;
        MPI_CHECK(MPI_Comm_group(c, &mine));
        MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
        std::vector<int> ranks(size_);
        for (int r = 0; r < size_; r++) ranks[r] = r;
        info->world_ranks.resize(size_);
        MPI_CHECK(MPI_Group_translate_ranks(mine, size_, ranks.data(), world, info->world_ranks.data()));
        MPI_Group_free(&mine);
        MPI_Group_free(&world);
        group_ = std::move(info);
    }
    ~MpiComm() override {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
    }
    CommBackend backend() const override { return CommBackend::mpi; }

    CommHandle all_reduce_async(Tensor& x, ReduceOp op) override {
        auto p = std::make_unique<MpiPending>(CommOp::all_reduce, group_);
        p->outputs.emplace_back(x, true);
        Tensor& h = p->outputs.back().host;
        p->reqs.resize(1);
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, h.data(), to_int(h.numel(), "all_reduce"), mpi_type(h.dtype, true),
                                 op == ReduceOp::sum ? MPI_SUM : MPI_MAX, comm_, &p->reqs[0]));
        record(CommOp::all_reduce, (double)x.nbytes());
        return CommHandle(std::move(p));
    }

    CommHandle reduce_scatter_async(const Tensor& in, Tensor& out) override {
        const int64_t M = in.numel();
        check_part(in, out, "reduce_scatter");
        auto p = std::make_unique<MpiPending>(CommOp::reduce_scatter, group_);
        p->keep.push_back(input_buffer(in, out));
        p->outputs.emplace_back(out, false);
        for (int r = 0; r < size_; r++) p->counts.push_back(to_int(part_count(M, size_, r), "reduce_scatter"));
        p->reqs.resize(1);
        MPI_CHECK(MPI_Ireduce_scatter(p->keep[0].data(), p->outputs[0].host.data(), p->counts.data(),
                                      mpi_type(in.dtype, true), MPI_SUM, comm_, &p->reqs[0]));
        record(CommOp::reduce_scatter, (double)in.nbytes());
        return CommHandle(std::move(p));
    }

    CommHandle all_gather_async(const Tensor& in, Tensor& out) override {
        const int64_t M = out.numel();
        check_part(out, in, "all_gather");
        auto p = std::make_unique<MpiPending>(CommOp::all_gather, group_);
        // the part already in its place in the output (ZeRO's shard of the flat buffer): MPI_IN_PLACE
        const bool in_place = in.buf == out.buf && out.device() == Device::cpu &&
                              in.data() == (char*)out.data() + part_start(M, size_, rank_) * dtype_size(out.dtype);
        if (!in_place) p->keep.push_back(input_buffer(in, out));
        p->outputs.emplace_back(out, false);
        for (int r = 0; r < size_; r++) {
            p->counts.push_back(to_int(part_count(M, size_, r), "all_gather"));
            p->displs.push_back(to_int(part_start(M, size_, r), "all_gather"));
        }
        const MPI_Datatype t = mpi_type(in.dtype, false);
        p->reqs.resize(1);
        MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : p->keep[0].data(), (int)in.numel(), t,
                                  p->outputs[0].host.data(), p->counts.data(), p->displs.data(), t, comm_, &p->reqs[0]));
        record(CommOp::all_gather, (double)out.nbytes());
        return CommHandle(std::move(p));
    }

    CommHandle broadcast_async(Tensor& x, int root) override {
        check_peer(root, "broadcast root");
        auto p = std::make_unique<MpiPending>(CommOp::broadcast, group_);
        p->outputs.emplace_back(x, rank_ == root);
        p->reqs.resize(1);
        MPI_CHECK(MPI_Ibcast(p->outputs[0].host.data(), to_int(x.numel(), "broadcast"), mpi_type(x.dtype, false), root,
                             comm_, &p->reqs[0]));
        record(CommOp::broadcast, (double)x.nbytes());
        return CommHandle(std::move(p));
    }

    CommHandle send_async(const Tensor& x, int peer, int tag) override {
        check_peer(peer, "send peer");
        CHECK(comm_ != MPI_COMM_WORLD || tag != kWatchdogTag, "send tag %d is reserved for the watchdog", tag);
        auto p = std::make_unique<MpiPending>(CommOp::send, group_, group_->world_ranks[peer]);
        p->keep.push_back(Staged(x, true).host);
        p->reqs.resize(1);
        MPI_CHECK(MPI_Isend(p->keep[0].data(), to_int(x.numel(), "send"), mpi_type(x.dtype, false), peer, tag, comm_,
                            &p->reqs[0]));
        record(CommOp::send, (double)x.nbytes());
        return CommHandle(std::move(p));
    }

    CommHandle recv_async(Tensor& x, int peer, int tag) override {
        check_peer(peer, "recv peer");
        CHECK(comm_ != MPI_COMM_WORLD || tag != kWatchdogTag, "recv tag %d is reserved for the watchdog", tag);
        auto p = std::make_unique<MpiPending>(CommOp::recv, group_, group_->world_ranks[peer]);
        p->outputs.emplace_back(x, false);
        p->reqs.resize(1);
        MPI_CHECK(MPI_Irecv(p->outputs[0].host.data(), to_int(x.numel(), "recv"), mpi_type(x.dtype, false), peer, tag,
                            comm_, &p->reqs[0]));
        record(CommOp::recv, (double)x.nbytes());
        return CommHandle(std::move(p));
    }

    CommHandle all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& sc, const std::vector<int64_t>& so,
                                  Tensor& out, const std::vector<int64_t>& rc,
                                  const std::vector<int64_t>& ro) override {
        const double sent = check_all_to_all_v(in, sc, so, out, rc, ro);
        auto p = std::make_unique<MpiPending>(CommOp::all_to_all, group_);
        for (int r = 0; r < size_; r++) {
            p->counts.push_back(to_int(sc[r], "all_to_all_v"));
            p->displs.push_back(to_int(so[r], "all_to_all_v"));
            p->counts2.push_back(to_int(rc[r], "all_to_all_v"));
            p->displs2.push_back(to_int(ro[r], "all_to_all_v"));
        }
        p->keep.push_back(input_buffer(in, out));
        p->outputs.emplace_back(out, true);  // parts nobody sends keep their old values
        const MPI_Datatype t = mpi_type(in.dtype, false);
        p->reqs.resize(1);
        MPI_CHECK(MPI_Ialltoallv(p->keep[0].data(), p->counts.data(), p->displs.data(), t, p->outputs[0].host.data(),
                                 p->counts2.data(), p->displs2.data(), t, comm_, &p->reqs[0]));
        // counted as what really leaves this rank; for equal chunks that is (K-1)/K·M, the ring figure
        count(CommOp::all_to_all, sent);
        return CommHandle(std::move(p));
    }

    // the blocking ones too are non-blocking calls waited for under the watchdog's deadline
    void barrier() override {
        std::vector<MPI_Request> req(1);
        MPI_CHECK(MPI_Ibarrier(comm_, &req[0]));
        wait_requests(req, CommOp::barrier, group_, -1);
        record(CommOp::barrier, 0.0);
    }

    double reduce_scalar(double x, ReduceOp op) override {
        double r = 0;
        std::vector<MPI_Request> req(1);
        MPI_CHECK(MPI_Iallreduce(&x, &r, 1, MPI_DOUBLE, op == ReduceOp::sum ? MPI_SUM : MPI_MAX, comm_, &req[0]));
        wait_requests(req, CommOp::all_reduce, group_, -1);
        return r;
    }

    // MPI_Comm_split has no non-blocking form: a set-up step, outside the watchdog
    std::unique_ptr<Comm> split(int color, int key, const std::string& name) override {
        MPI_Comm c;
        MPI_CHECK(MPI_Comm_split(comm_, color, key, &c));
        return std::make_unique<MpiComm>(c, name);
    }

   private:
    MPI_Comm comm_;
    std::shared_ptr<const GroupInfo> group_;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_world_comm() {
    CHECK(mpi_enabled(), "the MPI backend needs MPI started (runtime_init)");
    return std::make_unique<MpiComm>(MPI_COMM_WORLD, "world");
}

}  // namespace penta
#endif  // PENTA_MPI
