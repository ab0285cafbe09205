#pragma once
// The few collectives the trainer and the DDP engine use, behind one small interface, so that
// they do not depend on which c10d class provides them: c10d::ProcessGroupGloo and
// ProcessGroupNCCL derive from c10d::ProcessGroup in libtorch 1.x and from c10d::Backend in
// 2.x, with the same methods. Every call is asynchronous and returns the c10d work to wait on;
// the tensors must stay untouched until then. Calls on one object must be issued in the same
// order on every rank (as with any process group); the object is not thread-safe.

#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace ddprun::workers {

using WorkHandle = c10::intrusive_ptr<c10d::Work>;

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend_name() const = 0;
  // In-place sum over all ranks.
  virtual WorkHandle allreduce_sum(at::Tensor& tensor) = 0;
  // In place: every rank gets root's tensor (same shape and dtype everywhere).
  virtual WorkHandle broadcast(at::Tensor& tensor, int root) = 0;
  // outputs[r] receives rank r's input; outputs must hold size() tensors shaped like input.
  virtual WorkHandle allgather(std::vector<at::Tensor>& outputs, at::Tensor& input) = 0;
  virtual WorkHandle barrier() = 0;
};

// Adapts a c10d process group or backend (anything with c10d's collective methods).
template <class Group>
class C10dCollectives final : public Collectives {
 public:
  explicit C10dCollectives(c10::intrusive_ptr<Group> group) : group_(std::move(group)) {}

  int rank() const override { return group_->getRank(); }
  int size() const override { return group_->getSize(); }
  std::string backend_name() const override { return group_->getBackendName(); }

  WorkHandle allreduce_sum(at::Tensor& tensor) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    return group_->allreduce(tensors, opts);
  }
  WorkHandle broadcast(at::Tensor& tensor, int root) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return group_->broadcast(tensors, opts);
  }
  WorkHandle allgather(std::vector<at::Tensor>& outputs, at::Tensor& input) override {
    std::vector<std::vector<at::Tensor>> out{outputs};
    std::vector<at::Tensor> in{input};
    return group_->allgather(out, in);
  }
  WorkHandle barrier() override { return group_->barrier(); }

  const c10::intrusive_ptr<Group>& group() const { return group_; }

 private:
  c10::intrusive_ptr<Group> group_;
};

}  // namespace ddprun::workers
