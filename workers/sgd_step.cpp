#include "workers/sgd_step.hpp"

#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "workers/torch_compat.hpp"

namespace ddprun::workers {

void foreach_sgd_step(torch::optim::SGD& optimizer) {
  torch::NoGradGuard no_grad;
  auto& state = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    std::vector<at::Tensor> params;
    std::vector<at::Tensor> grads;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      params.push_back(p);
      grads.push_back(p.grad());
    }
    if (params.empty()) continue;
    // d_p = grad + weight_decay * p
    std::vector<at::Tensor> d_p = o.weight_decay() != 0 ? at::_foreach_add(grads, params, o.weight_decay()) : grads;
    if (o.momentum() != 0) {
      // buf = momentum * buf + (1 - dampening) * d_p; a parameter's first buffer is d_p itself.
      std::vector<at::Tensor> buffers;
      std::vector<at::Tensor> old_buffers;
      std::vector<at::Tensor> old_d_p;
      for (std::size_t i = 0; i < params.size(); ++i) {
        auto key = compat::optimizer_state_key(state, params[i]);
        auto it = state.find(key);
        if (it == state.end()) {
          auto param_state = std::make_unique<torch::optim::SGDParamState>();
          param_state->momentum_buffer(d_p[i].clone());
          buffers.push_back(param_state->momentum_buffer());
          state[key] = std::move(param_state);
        } else {
          buffers.push_back(static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer());
          old_buffers.push_back(buffers.back());
          old_d_p.push_back(d_p[i]);
        }
      }
      if (!old_buffers.empty()) {
        at::_foreach_mul_(old_buffers, o.momentum());
        at::_foreach_add_(old_buffers, old_d_p, 1 - o.dampening());
      }
      d_p = o.nesterov() ? at::_foreach_add(d_p, buffers, o.momentum()) : buffers;
    }
    at::_foreach_add_(params, d_p, -o.lr());
  }
}

}  // namespace ddprun::workers
