#pragma once
// torch::optim::SGD's step with multi-tensor (_foreach) kernels: a handful of launches for the
// whole model instead of about four per parameter. The arithmetic is SGD's own (weight decay,
// momentum with dampening, Nesterov, learning rate; the same formulas in the same order), and
// the momentum buffers live in the optimizer's state, where SGD's save/load find them, so
// checkpoints are unchanged and either step may follow the other.

#include <torch/optim/sgd.h>

namespace ddprun::workers {

// One step for every parameter group; parameters without a gradient are skipped, as SGD does.
void foreach_sgd_step(torch::optim::SGD& optimizer);

}  // namespace ddprun::workers
