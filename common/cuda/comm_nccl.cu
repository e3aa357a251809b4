// comm_nccl.cu — the NCCL backend of Comm (comm.hpp): GPU tensors moved by NCCL on a stream of their own.
//
// Playbook: "Data parallelism" (overlapping gradient communication with the backward pass) and the
// appendix "A quick primer on collective operations". Programs pick it with `--device cuda --comm nccl`
// (or `--comm auto`) and run one process per GPU: `mpirun -np <GPUs> build/bin/<chapter> --device cuda`.
//
// How communication overlaps computation. Every op of the CUDA backend runs on the legacy default stream,
// called "compute" here. Each Comm owns one more stream, "comm", created non-blocking so that neither
// waits for the other implicitly. An *_async call
//   1. records an event on compute and makes comm wait for it, so the kernels that produced the tensor
//      finish before NCCL reads it;
//   2. enqueues the NCCL kernel on comm and records a "done" event after it;
//   3. returns at once: the host goes on launching compute kernels (the next layer's backward), and the GPU
//      runs them beside the NCCL kernel.
// wait() does not block the host either: it makes compute wait for "done" (cudaStreamWaitEvent), so only
// the kernels launched after it (the optimizer reading the summed gradients) wait for the data. test()
// asks whether "done" has happened (cudaEventQuery). The MPI backend overlaps through non-blocking MPI
// calls; here the overlap is between two CUDA streams.
//
// send/recv are batched. NCCL's send and recv block the GPU until the peer posts the matching call, and
// kernels on one stream run one after another, so a ring in which every rank sends and then receives would
// wait forever. NCCL's answer is a group (ncclGroupStart/End): the calls of one group progress together.
// So send_async and recv_async are queued, and the queue is issued as ONE group when any handle of this
// Comm is waited on or tested, or when another operation is posted on it: "start the send, receive, wait"
// (ring_all_reduce) becomes one grouped send-and-receive. So, like a large MPI_Isend that Open MPI moves
// only inside MPI calls, a send is under way only once the program waits, tests or posts something else.
// NCCL has no tags: messages between two ranks match in the order they were posted.
//
// Uneven parts (comm.hpp: the first M % K ranks hold one element more): NCCL's reduce-scatter and
// all-gather need equal parts, so those go through a temporary of K·ceil(M/K) elements (Tag::comm) in which
// every part is padded to ceil(M/K). Equal parts take the direct path with no copies.
//
// Lifetimes: wait() returns before the GPU has finished, so a tensor the caller frees after wait() could
// be handed to a kernel on compute while NCCL still reads it. Every tensor an operation touches is
// therefore recorded on the comm stream with the device pool (record_stream, device_pool.hpp): when it is
// freed, the pool records an event on the comm stream and reuses the block only once that has happened.
// Polling: every event and stream query goes through cuda_poll.hpp's query_done, which consumes the
// cudaErrorNotReady the runtime may leave as the last error (else the next kernel-launch check throws).
//
// Order: like MPI, every rank must post the operations of a Comm in the same order. The Comms of a grid
// (dp, tp, ...) have a stream each and their kernels may run at the same time, so ranks must also post the
// operations of different Comms in the same order — true when every rank runs the same program.
//
// Errors: a failed peer does not make a CUDA call fail; NCCL reports it through ncclCommGetAsyncError,
// checked whenever the host waits for this Comm. The communicator is destroyed with ncclCommDestroy, or
// with ncclCommAbort when an error is pending or an exception is unwinding (a failing rank must not block
// in a teardown its peers never join).
// Hangs: the host blocks on a communicator only in sync() (barrier, the scalar all-reduce, which every
// step makes for the gradient norm: its copies go through pinned host memory, so they are queued, not
// waited for inside the driver), and that wait has the watchdog's deadline (watchdog.hpp,
// --comm-timeout): past it every live communicator is aborted (ncclCommAbort), the report names the
// oldest unfinished operation of each, and the job is aborted. A wait() does not block the host (the
// compute stream waits on the GPU), so a stuck collective shows up at the next sync(), whichever group it
// was on. Set-up (ncclCommInitRank, ncclCommSplit) blocks outside the watchdog.
#include "../comm.hpp"

#if defined(PENTA_NCCL)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>

#include "../runtime.hpp"
#include "../watchdog.hpp"
#include "cuda_poll.hpp"
#include "cuda_util.cuh"

namespace penta {

namespace {

constexpr cudaStream_t kComputeStream = 0;  // where the CUDA ops launch (no stream argument: the default)

ncclDataType_t nccl_type(DType t, bool reducing, const char* what) {
    switch (t) {
        case DType::f32: return ncclFloat32;
        case DType::bf16: return ncclBfloat16;
        case DType::f16: return ncclFloat16;
        case DType::i32: return ncclInt32;
        case DType::e4m3:
        case DType::e5m2: break;
    }
    CHECK(!reducing, "%s: NCCL reduces f32, bf16, f16 or i32, not %s (fp8 moves as bytes only: all_gather, "
          "broadcast, send/recv, all_to_all)", what, dtype_name(t));
    return ncclUint8;
}

// One operation (or one batch of send/recv) as the GPU sees it: the event after its last kernel.
struct Completion {
    cudaEvent_t done = nullptr;
    bool issued = false;  // false while a send/recv batch is still queued
    const char* op = "send/recv";  // what it is, for the watchdog's report
    Completion() { CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming)); }
    ~Completion() { cudaEventDestroy(done); }
    Completion(const Completion&) = delete;
    Completion& operator=(const Completion&) = delete;
};

// A send or recv waiting in the queue for its batch to be issued.
struct P2POp {
    bool send;
    Tensor t;
    int peer;
};

// What one NCCL communicator owns, shared by its Comm and the handles of its operations in flight (so a
// handle stays valid even if it outlives the Comm).
struct NcclState;
// Every live communicator of this process: when a wait passes the deadline, all of them are aborted (the
// GPU must let go of every NCCL kernel, whichever group is stuck) and each one's oldest unfinished
// operation is named.
std::vector<NcclState*>& live_states() {
    static std::vector<NcclState*> states;
    return states;
}

struct NcclState {
    ncclComm_t comm = nullptr;
    std::string name;  // the group's, for the watchdog's report
    int size = 0;
    cudaStream_t stream = nullptr;
    cudaEvent_t ready = nullptr;                          // recorded on compute before each operation
    Tensor scratch;                                       // 8 bytes for barrier and all_reduce_scalar
    double* host_scalar = nullptr;                        // pinned: all_reduce_scalar's value in, result out
    std::vector<P2POp> queued;                            // send/recv posted but not yet issued
    std::shared_ptr<Completion> batch;                    // the completion the queued ops will share
    std::deque<std::shared_ptr<Completion>> in_flight;    // issued, in stream order, until done

    NcclState(ncclComm_t c, std::string group_name) : comm(c), name(std::move(group_name)) {
        live_states().push_back(this);
        NCCL_CHECK(ncclCommCount(c, &size));
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
        scratch = Tensor::empty({2}, DType::f32, Device::cuda, Tag::comm);
        uses(scratch);
        after_compute();  // the pool's block may have served a kernel on compute that is still queued
        CUDA_CHECK(cudaMemsetAsync(scratch.data(), 0, scratch.nbytes(), stream));
        CUDA_CHECK(cudaHostAlloc((void**)&host_scalar, 2 * sizeof(double), cudaHostAllocDefault));
    }
    ~NcclState() {
        auto& live = live_states();
        live.erase(std::remove(live.begin(), live.end(), this), live.end());
        ncclResult_t err = ncclSuccess;
        ncclCommGetAsyncError(comm, &err);
        if (err != ncclSuccess || std::uncaught_exceptions() > 0) {
            ncclCommAbort(comm);
        } else {
            cudaStreamSynchronize(stream);
            ncclCommDestroy(comm);
        }
        // the pool stops waiting for this stream (its work is over, or aborted with the job), then it goes
        scratch = Tensor();
        cuda::forget_stream(stream);
        cudaEventDestroy(ready);
        cudaStreamDestroy(stream);
        cudaFreeHost(host_scalar);
    }

    void check_async_error() {
        ncclResult_t err = ncclSuccess;
        NCCL_CHECK(ncclCommGetAsyncError(comm, &err));
        if (err != ncclSuccess && err != ncclInProgress)
            FAIL("NCCL reported an error on this communicator: %s (%s); a peer may have failed",
                 ncclGetErrorString(err), ncclGetLastError(comm));
    }

    // t is read or written on the comm stream: its block is not reused until that work is over
    void uses(const Tensor& t) { cuda::record_stream(t.buf->ptr, stream); }

    // The comm stream waits for everything launched on compute so far: the tensors are ready.
    void after_compute() {
        CUDA_CHECK(cudaEventRecord(ready, kComputeStream));
        CUDA_CHECK(cudaStreamWaitEvent(stream, ready, 0));
    }

    // Marks the end of an operation just enqueued on the comm stream, which touched `used`.
    std::shared_ptr<Completion> issued(CommOp op, std::initializer_list<const Tensor*> used) {
        for (const Tensor* t : used) uses(*t);
        auto c = std::make_shared<Completion>();
        c->op = comm_op_name(op);
        complete(c);
        return c;
    }
    void complete(const std::shared_ptr<Completion>& c) {
        CUDA_CHECK(cudaEventRecord(c->done, stream));
        c->issued = true;
        in_flight.push_back(c);
    }

    // Forgets finished operations (they finish in stream order).
    void sweep() {
        while (!in_flight.empty() && cuda::event_done(in_flight.front()->done, "cudaEventQuery of an NCCL operation"))
            in_flight.pop_front();
    }

    // Issues the queued send/recv as one group (see the header comment).
    void flush() {
        sweep();
        if (queued.empty()) return;
        NCCL_CHECK(ncclGroupStart());
        for (const P2POp& op : queued) {
            const ncclDataType_t t = nccl_type(op.t.dtype, false, op.send ? "send" : "recv");
            if (op.send)
                NCCL_CHECK(ncclSend(op.t.data(), (size_t)op.t.numel(), t, op.peer, comm, stream));
            else
                NCCL_CHECK(ncclRecv(op.t.data(), (size_t)op.t.numel(), t, op.peer, comm, stream));
        }
        NCCL_CHECK(ncclGroupEnd());
        queued.clear();
        complete(batch);
        batch.reset();
    }

    // The oldest operation on this communicator's stream that has not finished ("" when none has). For the
    // watchdog's report, so it never throws: an operation whose query fails counts as unfinished.
    std::string oldest_unfinished() const {
        for (const auto& c : in_flight) {
            try {
                if (!cuda::event_done(c->done, "cudaEventQuery")) return c->op;
            } catch (const std::exception&) {
                return std::string(c->op) + " (its event query failed)";
            }
        }
        return "";
    }

    // Host waits for the comm stream, checking for peer failures instead of hanging on a dead peer, under
    // the watchdog's deadline (watchdog.hpp): on expiry every communicator is aborted and named.
    void sync(CommOp op) {
        wait_until(
            [&] {
                if (cuda::stream_done(stream, "cudaStreamQuery of an NCCL stream")) return true;
                check_async_error();
                return false;
            },
            [&] {
                std::string s = strfmt("%s on group %s (%d ranks, NCCL)", comm_op_name(op), name.c_str(), size);
                for (NcclState* st : live_states()) {  // the stream may be waiting for another group's work
                    const std::string o = st->oldest_unfinished();
                    if (!o.empty()) s += strfmt("; oldest unfinished on group %s: %s", st->name.c_str(), o.c_str());
                }
                return s;
            },
            [] {
                for (NcclState* st : live_states()) ncclCommAbort(st->comm);  // the job is ending: no destroy
            });
        in_flight.clear();
    }
};

// The handle of an operation: wait() orders compute after it, test() asks whether it is over.
struct NcclPending : CommHandle::Pending {
    std::shared_ptr<NcclState> st;
    std::shared_ptr<Completion> c;
    NcclPending(std::shared_ptr<NcclState> s, std::shared_ptr<Completion> comp)
        : st(std::move(s)), c(std::move(comp)) {}
    ~NcclPending() override {
        // a dropped send/recv handle must still be issued, or its peer waits forever
        if (!c->issued && std::uncaught_exceptions() == 0) {
            try {
                st->flush();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "error: %s\n", e.what());
            }
        }
    }
    void wait() override {
        if (!c->issued) st->flush();
        st->check_async_error();
        CUDA_CHECK(cudaStreamWaitEvent(kComputeStream, c->done, 0));
        st->sweep();
    }
    bool test() override {
        if (!c->issued) st->flush();
        if (!cuda::event_done(c->done, "cudaEventQuery of an NCCL operation")) {
            st->check_async_error();
            return false;
        }
        st->sweep();
        return true;
    }
};

class NcclComm : public Comm {
   public:
    NcclComm(ncclComm_t c, std::string name) : st_(std::make_shared<NcclState>(c, name)) {
        NCCL_CHECK(ncclCommUserRank(c, &rank_));
        NCCL_CHECK(ncclCommCount(c, &size_));
        name_ = std::move(name);
    }
    CommBackend backend() const override { return CommBackend::nccl; }

    CommHandle all_reduce_async(Tensor& x, ReduceOp op) override {
        check_device(x, "all_reduce");
        const ncclDataType_t t = nccl_type(x.dtype, true, "all_reduce");
        begin();
        NCCL_CHECK(ncclAllReduce(x.data(), x.data(), (size_t)x.numel(), t, op == ReduceOp::sum ? ncclSum : ncclMax,
                                 st_->comm, st_->stream));
        record(CommOp::all_reduce, (double)x.nbytes());
        return handle(st_->issued(CommOp::all_reduce, {&x}));
    }

    CommHandle reduce_scatter_async(const Tensor& in, Tensor& out) override {
        const int64_t M = in.numel();
        check_pair(in, out, "reduce_scatter");
        const ncclDataType_t t = nccl_type(in.dtype, true, "reduce_scatter");
        begin();
        if (M % size_ == 0) {
            NCCL_CHECK(ncclReduceScatter(in.data(), out.data(), (size_t)(M / size_), t, ncclSum, st_->comm,
                                         st_->stream));
            record(CommOp::reduce_scatter, (double)in.nbytes());
            return handle(st_->issued(CommOp::reduce_scatter, {&in, &out}));
        }
        // every part padded to P elements; in place: this rank's padded part is where NCCL leaves the sum
        const int64_t P = M / size_ + 1;
        Tensor padded = Tensor::empty({size_ * P}, in.dtype, Device::cuda, Tag::comm);  // (K·P,)
        for (int r = 0; r < size_; r++) copy_part(padded.flat(r * P, P), part_of(in, r));
        Tensor mine = padded.flat(rank_ * P, P);  // (P,)
        NCCL_CHECK(ncclReduceScatter(padded.data(), mine.data(), (size_t)P, t, ncclSum, st_->comm, st_->stream));
        copy_part(out, mine.flat(0, out.numel()));
        record(CommOp::reduce_scatter, (double)in.nbytes());
        return handle(st_->issued(CommOp::reduce_scatter, {&in, &out, &padded}));
    }

    CommHandle all_gather_async(const Tensor& in, Tensor& out) override {
        const int64_t M = out.numel();
        check_pair(out, in, "all_gather");
        const ncclDataType_t t = nccl_type(in.dtype, false, "all_gather");
        begin();
        if (M % size_ == 0) {
            NCCL_CHECK(ncclAllGather(in.data(), out.data(), (size_t)(M / size_), t, st_->comm, st_->stream));
            record(CommOp::all_gather, (double)out.nbytes());
            return handle(st_->issued(CommOp::all_gather, {&in, &out}));
        }
        const int64_t P = M / size_ + 1;
        Tensor padded = Tensor::empty({size_ * P}, in.dtype, Device::cuda, Tag::comm);  // (K·P,)
        Tensor mine = padded.flat(rank_ * P, P);                                       // (P,)
        copy_part(mine, in);
        NCCL_CHECK(ncclAllGather(mine.data(), padded.data(), (size_t)P, t, st_->comm, st_->stream));
        for (int r = 0; r < size_; r++) {
            Tensor dst = part_of(out, r);
            copy_part(dst, padded.flat(r * P, dst.numel()));
        }
        record(CommOp::all_gather, (double)out.nbytes());
        return handle(st_->issued(CommOp::all_gather, {&in, &out, &padded}));
    }

    CommHandle broadcast_async(Tensor& x, int root) override {
        check_device(x, "broadcast");
        check_peer(root, "broadcast root");
        const ncclDataType_t t = nccl_type(x.dtype, false, "broadcast");
        begin();
        NCCL_CHECK(ncclBroadcast(x.data(), x.data(), (size_t)x.numel(), t, root, st_->comm, st_->stream));
        record(CommOp::broadcast, (double)x.nbytes());
        return handle(st_->issued(CommOp::broadcast, {&x}));
    }

    // tag: NCCL has none, messages between two ranks match in posting order (see the header)
    CommHandle send_async(const Tensor& x, int peer, int /*tag*/) override {
        CommHandle h = queue(true, x, peer);
        record(CommOp::send, (double)x.nbytes());
        return h;
    }
    CommHandle recv_async(Tensor& x, int peer, int /*tag*/) override {
        CommHandle h = queue(false, x, peer);
        record(CommOp::recv, (double)x.nbytes());
        return h;
    }

    CommHandle all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& sc, const std::vector<int64_t>& so,
                                  Tensor& out, const std::vector<int64_t>& rc,
                                  const std::vector<int64_t>& ro) override {
        check_device(in, "all_to_all_v");
        check_device(out, "all_to_all_v");
        const double sent = check_all_to_all_v(in, sc, so, out, rc, ro);
        const ncclDataType_t t = nccl_type(in.dtype, false, "all_to_all_v");
        const size_t es = dtype_size(in.dtype);
        begin();
        // one send and one receive per peer, in one group so they all progress together; parts nobody
        // sends are not written and keep their old values
        const char* src = (const char*)in.data();
        char* dst = (char*)out.data();
        NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < size_; r++) {
            if (sc[r] > 0) NCCL_CHECK(ncclSend(src + so[r] * es, (size_t)sc[r], t, r, st_->comm, st_->stream));
            if (rc[r] > 0) NCCL_CHECK(ncclRecv(dst + ro[r] * es, (size_t)rc[r], t, r, st_->comm, st_->stream));
        }
        NCCL_CHECK(ncclGroupEnd());
        // counted as what really leaves this rank; for equal chunks that is (K-1)/K·M, the ring figure
        count(CommOp::all_to_all, sent);
        return handle(st_->issued(CommOp::all_to_all, {&in, &out}));
    }

    // An all-reduce of one float that every rank must join, then the host waits for it.
    void barrier() override {
        st_->flush();
        NCCL_CHECK(ncclAllReduce(st_->scratch.data(), st_->scratch.data(), 1, ncclFloat32, ncclSum, st_->comm,
                                 st_->stream));
        st_->sync(CommOp::barrier);
        record(CommOp::barrier, 0.0);
    }

    // The copies go through pinned host memory: with a pageable (stack) variable cudaMemcpyAsync would
    // block inside the driver until the all-reduce is over — a dead peer would hang it there, out of the
    // watchdog's reach. Queued this way, the host's one wait is sync()'s watched poll.
    double reduce_scalar(double x, ReduceOp op) override {
        st_->flush();
        double* d = (double*)st_->scratch.data();
        double* h = st_->host_scalar;  // h[0] in, h[1] out; the previous call's copies are over (it synced)
        h[0] = x;
        CUDA_CHECK(cudaMemcpyAsync(d, &h[0], sizeof(double), cudaMemcpyHostToDevice, st_->stream));
        NCCL_CHECK(ncclAllReduce(d, d, 1, ncclFloat64, op == ReduceOp::sum ? ncclSum : ncclMax, st_->comm,
                                 st_->stream));
        CUDA_CHECK(cudaMemcpyAsync(&h[1], d, sizeof(double), cudaMemcpyDeviceToHost, st_->stream));
        st_->sync(CommOp::all_reduce);
        return h[1];
    }

    std::unique_ptr<Comm> split(int color, int key, const std::string& name) override {
        CHECK(color >= 0, "split of %s: color %d must be >= 0 (every rank joins one group)", name_.c_str(), color);
        st_->flush();  // program order: what was posted before the split goes first
        ncclComm_t c = nullptr;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
        // ranks ordered by key, ties by rank in this communicator: MPI_Comm_split's rule
        NCCL_CHECK(ncclCommSplit(st_->comm, color, key, &c, nullptr));
#else
        c = split_by_hand(color, key);
#endif
        return std::make_unique<NcclComm>(c, name);
    }

   private:
    // every operation but send/recv: issue what is queued (program order), then wait for compute
    void begin() {
        st_->flush();
        st_->after_compute();
    }
    CommHandle handle(std::shared_ptr<Completion> c) {
        return CommHandle(std::make_unique<NcclPending>(st_, std::move(c)));
    }

    CommHandle queue(bool send, const Tensor& x, int peer) {
        check_device(x, send ? "send" : "recv");
        check_peer(peer, send ? "send peer" : "recv peer");
        nccl_type(x.dtype, false, send ? "send" : "recv");  // checked now, not at the flush
        st_->sweep();
        st_->after_compute();  // the tensor is ready now; the comm stream waits for it before the batch
        if (!st_->batch) st_->batch = std::make_shared<Completion>();
        st_->uses(x);
        st_->queued.push_back({send, x, peer});
        return CommHandle(std::make_unique<NcclPending>(st_, st_->batch));
    }

    // rank r's part of a flat buffer (comm.hpp's rule), a view
    Tensor part_of(const Tensor& flat, int r) const {
        const int64_t M = flat.numel();
        return flat.flat(part_start(M, size_, r), part_count(M, size_, r));
    }

    // part of a padded buffer <-> part of a flat one, on the comm stream; a short part's padding is zeroed
    // so the padded elements hold defined values
    void copy_part(const Tensor& dst, const Tensor& src) {
        CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, st_->stream));
        if (dst.nbytes() > src.nbytes())
            CUDA_CHECK(cudaMemsetAsync((char*)dst.data() + src.nbytes(), 0, dst.nbytes() - src.nbytes(), st_->stream));
    }

    void check_device(const Tensor& t, const char* what) const {
        CHECK(t.device() == Device::cuda,
              "%s on %s: the NCCL backend moves GPU tensors only, this one is on %s (use --comm mpi for host tensors)",
              what, name_.c_str(), device_name(t.device()));
    }
    // reduce_scatter / all_gather: both on the GPU, and `part` is this rank's part of `whole`
    void check_pair(const Tensor& whole, const Tensor& part, const char* what) const {
        check_device(whole, what);
        check_device(part, what);
        check_part(whole, part, what);
    }

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
    // NCCL before 2.18 has no ncclCommSplit: an all-gather tells every rank every (color, key), the first
    // rank of each new group makes its unique id, and a second all-gather hands the ids round.
    ncclComm_t split_by_hand(int color, int key) {
        const std::vector<int32_t> ck = all_gather_ints({color, key});  // (K·2,) color and key of each rank
        auto before = [&](int a, int b) {  // a comes before b in the new group
            return ck[2 * a + 1] < ck[2 * b + 1] || (ck[2 * a + 1] == ck[2 * b + 1] && a < b);
        };
        int new_rank = 0, new_size = 0, leader = -1;
        for (int r = 0; r < size_; r++) {
            if (ck[2 * r] != color) continue;
            new_size++;
            if (before(r, rank_)) new_rank++;
            if (leader < 0 || before(r, leader)) leader = r;
        }
        ncclUniqueId id;
        std::memset(&id, 0, sizeof id);
        if (leader == rank_) NCCL_CHECK(ncclGetUniqueId(&id));
        std::vector<int32_t> mine(sizeof id / sizeof(int32_t));
        std::memcpy(mine.data(), &id, sizeof id);
        const std::vector<int32_t> ids = all_gather_ints(mine);  // (K·32,) the leaders' ids, zeros elsewhere
        std::memcpy(&id, ids.data() + leader * mine.size(), sizeof id);
        ncclComm_t c = nullptr;
        NCCL_CHECK(ncclCommInitRank(&c, new_size, id, new_rank));
        return c;
    }
    std::vector<int32_t> all_gather_ints(const std::vector<int32_t>& mine) {
        const int64_t n = (int64_t)mine.size();
        Tensor all = Tensor::empty({size_ * n}, DType::i32, Device::cuda, Tag::comm);  // (K·n,)
        Tensor part = all.flat(rank_ * n, n);
        CUDA_CHECK(cudaMemcpyAsync(part.data(), mine.data(), part.nbytes(), cudaMemcpyHostToDevice, st_->stream));
        NCCL_CHECK(ncclAllGather(part.data(), all.data(), (size_t)n, ncclInt32, st_->comm, st_->stream));
        st_->sync(CommOp::all_gather);
        return all.to_host_i32();
    }
#endif

    std::shared_ptr<NcclState> st_;
};

// The GPU of this process: runtime_init already made it current (the node-local rank modulo the visible
// count, so the ranks of a node use different GPUs); NCCL binds the communicator to the current device.
int current_device() {
    int n = 0, dev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n));
    CHECK(n > 0, "--comm nccl needs a GPU, and none is visible");
    CUDA_CHECK(cudaGetDevice(&dev));
    return dev;
}

}  // namespace

std::unique_ptr<Comm> make_nccl_world_comm() {
    const int dev = current_device();
    const int rank = world_rank(), size = world_size();
    // rank 0 makes the id (it also opens the socket the others connect to) and MPI hands it round
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
#if defined(PENTA_MPI)
    if (mpi_enabled()) MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
#endif
    ncclComm_t c = nullptr;
    const ncclResult_t r = ncclCommInitRank(&c, size, id, rank);
    CHECK(r == ncclSuccess,
          "ncclCommInitRank (rank %d of %d on GPU %d): %s: %s. NCCL needs one GPU per process; to share GPUs "
          "between ranks use --comm mpi", rank, size, dev, ncclGetErrorString(r), ncclGetLastError(nullptr));
    return std::make_unique<NcclComm>(c, "world");
}

}  // namespace penta
#endif  // PENTA_NCCL
