#pragma once
// Counting the CUDA devices this process may use, without linking CUDA: ddprun must run on
// machines without a GPU or a CUDA toolkit, so the driver is loaded only when asked for.

#include <string>
#include <vector>

namespace ddprun {

// The number of CUDA devices visible to this process (the driver applies
// CUDA_VISIBLE_DEVICES itself). 0 when libcuda.so.1 is absent, cuInit fails, or
// CUDA_VISIBLE_DEVICES hides every device. Blocks for as long as cuInit takes (up to a
// second or so on a large machine). Not thread-safe with other CUDA initialisation.
int visible_cuda_devices();

// The PCI address ("0000:18:00.0") of each CUDA device visible to this process, in the
// driver's order, which is the workers' device numbering; empty when the driver is absent or
// lists none. Loads the driver as visible_cuda_devices does.
std::vector<std::string> visible_cuda_pci_bus_ids();

}  // namespace ddprun
