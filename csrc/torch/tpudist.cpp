// tpudist: the c10d backend for "tpu" tensors.
//
// PJRT's C API has no cross-process collectives that the CPU plugin
// implements, so every op stages its tpu tensors through host memory and runs
// on a Gloo backend created on the same store (the fallback the design
// allows). CPU tensors pass straight through, so one backend serves both
// devices of a group created with init_process_group("tpudist").
//
// A Work copies its host results back into the tpu tensors when it is waited
// for (c10d waits at once for synchronous calls); getFuture() waits too, so a
// future is always completed with the tpu tensors, as DDP expects.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "common.h"

namespace torchtpu {
namespace {

using c10d::OpType;
using c10d::ReduceOp;
using TensorList = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

bool on_tpu(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

// A staged op: host tensors Gloo works on, and where results go back.
struct Staging {
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;  // (tpu, host)
  std::function<void()> after;  // runs on host results before copy-back
  std::vector<c10::Device> devices;

  void note_device(const at::Tensor& t) {
    if (!on_tpu(t)) return;
    for (const auto& d : devices)
      if (d == t.device()) return;
    devices.push_back(t.device());
  }
  // Host copy of an input (tpu) or the tensor itself (CPU).
  at::Tensor in(const at::Tensor& t) {
    at::NoGradGuard no_grad;
    note_device(t);
    return on_tpu(t) ? t.to(at::kCPU).contiguous() : t;
  }
  // Host buffer for an output; its contents go back to `t` after the wait.
  at::Tensor out(const at::Tensor& t) {
    if (!on_tpu(t)) return t;
    note_device(t);
    at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU));
    copy_back.emplace_back(t, host);
    return host;
  }
  // Host copy of a tensor that is both read and written (allreduce, ...).
  at::Tensor inout(const at::Tensor& t) {
    if (!on_tpu(t)) return t;
    at::Tensor host = in(t);
    copy_back.emplace_back(t, host);
    return host;
  }
  // The same over lists (and lists of lists) of tensors.
  template <class List, class Fn>
  static List each(const List& ts, Fn fn) {
    List r;
    for (const auto& t : ts) r.push_back(fn(t));
    return r;
  }
  TensorList in(const TensorList& ts) {
    return each(ts, [this](const at::Tensor& t) { return in(t); });
  }
  TensorList out(const TensorList& ts) {
    return each(ts, [this](const at::Tensor& t) { return out(t); });
  }
  TensorList inout(const TensorList& ts) {
    return each(ts, [this](const at::Tensor& t) { return inout(t); });
  }
  TensorLists in(const TensorLists& ts) {
    return each(ts, [this](const TensorList& l) { return in(l); });
  }
  TensorLists out(const TensorLists& ts) {
    return each(ts, [this](const TensorList& l) { return out(l); });
  }
};

class TpuWork : public c10d::Work {
 public:
  TpuWork(c10::intrusive_ptr<c10d::Work> inner, Staging staging,
          TensorList outputs, int rank, OpType type)
      : c10d::Work(rank, type),
        inner_(std::move(inner)),
        staging_(std::move(staging)),
        outputs_(std::move(outputs)) {}

  bool wait(std::chrono::milliseconds timeout) override {
    if (inner_) inner_->wait(timeout);
    finish();
    return true;
  }
  bool isCompleted() override {
    if (inner_ && !inner_->isCompleted()) return false;
    if (inner_ && inner_->exception()) return true;
    finish();
    return true;
  }
  bool isSuccess() const override {
    return !inner_ || (inner_->isCompleted() && !inner_->exception());
  }
  std::exception_ptr exception() const override {
    return inner_ ? inner_->exception() : nullptr;
  }
  int sourceRank() const override { return inner_->sourceRank(); }
  TensorList result() override { return outputs_; }
  void synchronize() override { finish(); }
  void abort() override {
    if (inner_) inner_->abort();
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    wait(kNoTimeout);
    auto future = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), staging_.devices);
    future->markCompleted(c10::IValue(outputs_));
    return future;
  }

 private:
  void finish() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_) return;
    // Results land in buffers that may require grad (a pipeline stage's
    // input): the copy is not part of any autograd graph.
    at::NoGradGuard no_grad;
    if (staging_.after) staging_.after();
    for (auto& [dst, host] : staging_.copy_back) dst.copy_(host);
    staging_.copy_back.clear();
    finished_ = true;
  }

  c10::intrusive_ptr<c10d::Work> inner_;
  Staging staging_;
  TensorList outputs_;
  std::mutex mutex_;
  bool finished_ = false;
};

// Gloo reduces SUM/PRODUCT/MIN/MAX/bitwise ops. PREMUL_SUM becomes a SUM of
// scaled inputs: an in-place op (all_reduce, reduce) scales its own buffers,
// the others scale copies so the caller's inputs stay intact.
void premultiply(const ReduceOp& op, TensorList& inputs, bool in_place) {
  if (op != ReduceOp::PREMUL_SUM) return;
  auto supplement =
      c10::static_intrusive_pointer_cast<c10d::PreMulSumSupplement>(op.supplement_);
  TORCH_CHECK(supplement, "tpudist: PREMUL_SUM without a factor");
  at::Scalar factor = supplement->tensor_factor.defined()
                          ? supplement->tensor_factor.item()
                          : at::Scalar(supplement->double_factor);
  for (auto& t : inputs) {
    if (in_place) t.mul_(factor);
    else t = t.mul(factor);
  }
}

// The op Gloo runs for `op`; AVG is a SUM whose host results are divided by
// the group size before they go back.
ReduceOp gloo_op(const ReduceOp& op, const TensorList& host_results, int size,
                 Staging& staging) {
  if (op == ReduceOp::PREMUL_SUM) return ReduceOp(ReduceOp::SUM);
  if (op != ReduceOp::AVG) return op;
  for (const auto& t : host_results) {
    TORCH_CHECK(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()),
                "tpudist: ReduceOp.AVG needs a floating-point tensor, got ",
                t.scalar_type());
  }
  staging.after = [host_results, size] {
    for (const auto& t : host_results) t.div_(size);
  };
  return ReduceOp(ReduceOp::SUM);
}

class TpuDistBackend : public c10d::Backend {
 public:
  TpuDistBackend(c10::intrusive_ptr<c10d::Backend> host, int rank, int size)
      : c10d::Backend(rank, size), host_(std::move(host)) {}

  const std::string getBackendName() const override { return "tpudist"; }

  void setTimeout(std::chrono::milliseconds timeout) override {
    host_->setTimeout(timeout);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(
      TensorList& tensors, const c10d::BroadcastOptions& opts) override {
    Staging s;
    auto host = s.inout(tensors);
    return done(host_->broadcast(host, opts), std::move(s), tensors,
                OpType::BROADCAST);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(
      TensorList& tensors, const c10d::AllreduceOptions& opts) override {
    Staging s;
    auto host = s.inout(tensors);
    c10d::AllreduceOptions o = opts;
    premultiply(opts.reduceOp, host, /*in_place=*/true);
    o.reduceOp = gloo_op(opts.reduceOp, host, getSize(), s);
    return done(host_->allreduce(host, o), std::move(s), tensors,
                OpType::ALLREDUCE);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      TensorList& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override {
    Staging s;
    auto host = s.inout(tensors);
    c10d::AllreduceCoalescedOptions o = opts;
    premultiply(opts.reduceOp, host, /*in_place=*/true);
    o.reduceOp = gloo_op(opts.reduceOp, host, getSize(), s);
    return done(host_->allreduce_coalesced(host, o), std::move(s), tensors,
                OpType::ALLREDUCE_COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> reduce(
      TensorList& tensors, const c10d::ReduceOptions& opts) override {
    Staging s;
    auto host = s.inout(tensors);
    c10d::ReduceOptions o = opts;
    // Only the root's result is defined; the others may hold anything.
    premultiply(opts.reduceOp, host, /*in_place=*/true);
    o.reduceOp = gloo_op(opts.reduceOp, host, getSize(), s);
    return done(host_->reduce(host, o), std::move(s), tensors,
                OpType::REDUCE);
  }

  c10::intrusive_ptr<c10d::Work> allgather(
      TensorLists& outputs, TensorList& inputs,
      const c10d::AllgatherOptions& opts) override {
    Staging s;
    auto in = s.in(inputs);
    auto out = s.out(outputs);
    return done(host_->allgather(out, in, opts), std::move(s), flat(outputs),
                OpType::ALLGATHER);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override {
    Staging s;
    auto in = s.in(input);
    // A flat output of world * numel elements, as NCCL takes it (and
    // accelerate's gather passes it to every backend not named "gloo"):
    // Gloo only takes the concatenated shape, so hand it a view of that
    // shape over the same storage.
    at::Tensor shaped = output;
    if (output.dim() == 1 && input.dim() > 1 && output.is_contiguous() &&
        output.numel() == static_cast<int64_t>(getSize()) * input.numel()) {
      std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end());
      sizes[0] *= getSize();
      shaped = output.view(sizes);
    }
    auto out = s.out(shaped);
    return done(host_->_allgather_base(out, in, opts), std::move(s), {output},
                OpType::_ALLGATHER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      TensorLists& outputs, TensorList& inputs,
      const c10d::AllgatherOptions& opts) override {
    Staging s;
    auto in = s.in(inputs);
    auto out = s.out(outputs);
    return done(host_->allgather_coalesced(out, in, opts), std::move(s),
                flat(outputs), OpType::ALLGATHER_COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      TensorList& outputs, TensorList& inputs,
      const c10d::AllgatherOptions& opts) override {
    Staging s;
    auto in = s.in(inputs);
    auto out = s.out(outputs);
    return done(host_->allgather_into_tensor_coalesced(out, in, opts),
                std::move(s), outputs, OpType::COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> gather(
      TensorLists& outputs, TensorList& inputs,
      const c10d::GatherOptions& opts) override {
    Staging s;
    auto in = s.in(inputs);
    auto out = s.out(outputs);
    return done(host_->gather(out, in, opts), std::move(s), flat(outputs),
                OpType::GATHER);
  }

  c10::intrusive_ptr<c10d::Work> scatter(
      TensorList& outputs, TensorLists& inputs,
      const c10d::ScatterOptions& opts) override {
    Staging s;
    auto in = s.in(inputs);
    auto out = s.out(outputs);
    return done(host_->scatter(out, in, opts), std::move(s), outputs,
                OpType::SCATTER);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      TensorList& outputs, TensorLists& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    Staging s;
    auto in = s.in(inputs);
    auto out = s.out(outputs);
    c10d::ReduceScatterOptions o = opts;
    for (auto& list : in) premultiply(opts.reduceOp, list, /*in_place=*/false);
    o.reduceOp = gloo_op(opts.reduceOp, out, getSize(), s);
    return done(host_->reduce_scatter(out, in, o), std::move(s), outputs,
                OpType::REDUCE_SCATTER);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override {
    Staging s;
    TensorList in{s.in(input)};
    premultiply(opts.reduceOp, in, /*in_place=*/false);
    auto out = s.out(output);
    c10d::ReduceScatterOptions o = opts;
    o.reduceOp = gloo_op(opts.reduceOp, {out}, getSize(), s);
    return done(host_->_reduce_scatter_base(out, in[0], o), std::move(s),
                {output}, OpType::_REDUCE_SCATTER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      TensorList& outputs, TensorList& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    Staging s;
    auto in = s.in(inputs);
    premultiply(opts.reduceOp, in, /*in_place=*/false);
    auto out = s.out(outputs);
    c10d::ReduceScatterOptions o = opts;
    o.reduceOp = gloo_op(opts.reduceOp, out, getSize(), s);
    return done(host_->reduce_scatter_tensor_coalesced(out, in, o),
                std::move(s), outputs, OpType::COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& out_splits,
      std::vector<int64_t>& in_splits,
      const c10d::AllToAllOptions& opts) override {
    Staging s;
    auto in = s.in(input);
    auto out = s.out(output);
    return done(host_->alltoall_base(out, in, out_splits, in_splits, opts),
                std::move(s), {output}, OpType::ALLTOALL_BASE);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(
      TensorList& outputs, TensorList& inputs,
      const c10d::AllToAllOptions& opts) override {
    Staging s;
    auto in = s.in(inputs);
    auto out = s.out(outputs);
    return done(host_->alltoall(out, in, opts), std::move(s), outputs,
                OpType::ALLTOALL);
  }

  c10::intrusive_ptr<c10d::Work> send(TensorList& tensors, int dst,
                                      int tag) override {
    Staging s;
    auto host = s.in(tensors);
    return done(host_->send(host, dst, tag), std::move(s), tensors,
                OpType::SEND);
  }

  c10::intrusive_ptr<c10d::Work> recv(TensorList& tensors, int src,
                                      int tag) override {
    Staging s;
    auto host = s.out(tensors);
    return done(host_->recv(host, src, tag), std::move(s), tensors,
                OpType::RECV);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(TensorList& tensors,
                                               int tag) override {
    Staging s;
    auto host = s.out(tensors);
    return done(host_->recvAnysource(host, tag), std::move(s), tensors,
                OpType::RECVANYSOURCE);
  }

  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override {
    return done(host_->barrier(opts), Staging(), {}, OpType::BARRIER);
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts,
                        bool wait_all_ranks) override {
    host_->monitoredBarrier(opts, wait_all_ranks);
  }
  void setSequenceNumberForGroup() override {
    host_->setSequenceNumberForGroup();
  }
  uint64_t getSequenceNumberForGroup() override {
    return host_->getSequenceNumberForGroup();
  }
  void abort() override { host_->abort(); }
  void shutdown() override { host_->shutdown(); }

 private:
  static TensorList flat(const TensorLists& lists) {
    TensorList r;
    for (const auto& l : lists) r.insert(r.end(), l.begin(), l.end());
    return r;
  }
  c10::intrusive_ptr<c10d::Work> done(c10::intrusive_ptr<c10d::Work> inner,
                                      Staging staging, TensorList outputs,
                                      OpType type) {
    return c10::make_intrusive<TpuWork>(std::move(inner), std::move(staging),
                                        std::move(outputs), getRank(), type);
  }

  c10::intrusive_ptr<c10d::Backend> host_;
};

}  // namespace

void init_tpudist_bindings(py::module& m) {
  m.def(
      "_tpudist_backend",
      [](c10::intrusive_ptr<c10d::Backend> host, int rank, int size) {
        TORCH_CHECK(host, "tpudist: no host backend");
        return c10::intrusive_ptr<c10d::Backend>(
            c10::make_intrusive<TpuDistBackend>(std::move(host), rank, size));
      },
      "Wraps a Gloo backend (same store, rank, size) into the tpudist "
      "backend, which stages tpu tensors through host memory.");
}

}  // namespace torchtpu
