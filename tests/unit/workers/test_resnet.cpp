// ResNets identical to torchvision's: parameter counts, names, order and outputs.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include <torch/serialize.h>
#include <torch/torch.h>

#include "common/error.hpp"
#include "testing/test_util.hpp"
#include "workers/resnet.hpp"

using namespace ddprun::workers;

TEST_CASE("resnet: parameter counts are torchvision's for 1000 classes", "[workers][resnet]") {
  // sum(p.numel() for p in torchvision.models.<arch>().parameters()), and the tensor counts.
  struct Expected {
    const char* arch;
    std::int64_t params;
    std::size_t tensors;
    std::size_t buffers;
  };
  for (const Expected& e : {Expected{"resnet18", 11'689'512, 62, 60},
                            Expected{"resnet50", 25'557'032, 161, 159},
                            Expected{"resnet152", 60'192'808, 467, 465}}) {
    ResNet model(e.arch, 1000);
    INFO(e.arch);
    CHECK(count_parameters(*model) == e.params);
    CHECK(model->parameters().size() == e.tensors);
    CHECK(model->buffers().size() == e.buffers);
  }
}

TEST_CASE("resnet: resnet34 and resnet101 counts, and a 10-class head", "[workers][resnet]") {
  CHECK(count_parameters(*ResNet("resnet34", 1000)) == 21'797'672);
  CHECK(count_parameters(*ResNet("resnet101", 1000)) == 44'549'160);
  CHECK(count_parameters(*ResNet("resnet50", 10)) == 23'528'522);
}

TEST_CASE("resnet: torchvision's module names, in torchvision's order", "[workers][resnet]") {
  ResNet model("resnet18", 10);
  auto names = model->named_parameters().keys();
  REQUIRE(names.size() == 62);
  CHECK(names[0] == "conv1.weight");
  CHECK(names[1] == "bn1.weight");
  CHECK(names[3] == "layer1.0.conv1.weight");
  CHECK(names[61] == "fc.bias");
  auto buffers = ResNet("resnet50", 10)->named_buffers().keys();
  CHECK(std::find(buffers.begin(), buffers.end(), "layer2.0.downsample.1.running_mean") !=
        buffers.end());
  CHECK(std::find(buffers.begin(), buffers.end(), "layer4.2.bn3.num_batches_tracked") !=
        buffers.end());
}

TEST_CASE("resnet: logits for any image size and unknown architectures rejected", "[workers][resnet]") {
  ResNet model("resnet18", 10);
  model->eval();
  torch::NoGradGuard no_grad;
  CHECK(model->forward(torch::rand({2, 3, 32, 32})).sizes() == std::vector<std::int64_t>{2, 10});
  CHECK(model->forward(torch::rand({1, 3, 64, 48})).sizes() == std::vector<std::int64_t>{1, 10});
  CHECK_THROWS_AS(ResNet("resnet20", 10), ddprun::ConfigError);
}

TEST_CASE("resnet: initialization follows torchvision", "[workers][resnet]") {
  torch::manual_seed(0);
  ResNet model("resnet18", 10);
  auto params = model->named_parameters();
  CHECK(params["bn1.weight"].eq(1).all().item<bool>());
  CHECK(params["bn1.bias"].eq(0).all().item<bool>());
  // Kaiming normal, fan_out, ReLU gain: std = sqrt(2 / (64 * 7 * 7)) for conv1.
  const double std = params["conv1.weight"].std().item<double>();
  CHECK(std == Approx(std::sqrt(2.0 / (64 * 49))).epsilon(0.05));
}

// Loads torchvision's weights (saved by Debian's python3) into our model and compares outputs.
TEST_CASE("resnet: same outputs as torchvision with the same weights", "[workers][resnet]") {
  if (std::system("/usr/bin/python3 -c 'import torchvision' >/dev/null 2>&1") != 0) {
    WARN("skipped: /usr/bin/python3 has no torchvision");
    return;
  }
  ddprun::test::TempDir dir;
  for (const char* arch : {"resnet18", "resnet50"}) {
    INFO(arch);
    const std::string file = dir.file(std::string(arch) + ".pt");
    const std::string script =
        "import torch, torchvision; torch.manual_seed(1); "
        "m = torchvision.models." + std::string(arch) + "(num_classes=10); "
        "[b.uniform_(0.5, 1.5) for n, b in m.named_buffers() if 'running_var' in n]; "
        "m.eval(); x = torch.rand(2, 3, 40, 40); "
        "torch.save({'state': dict(m.state_dict()), 'x': x, 'y': m(x).detach()}, '" + file + "')";
    REQUIRE(std::system(("/usr/bin/python3 -c \"" + script + "\"").c_str()) == 0);
    std::ifstream in(file, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto saved = torch::pickle_load(bytes).toGenericDict();
    auto state = saved.at("state").toGenericDict();

    ResNet model(arch, 10);
    torch::NoGradGuard no_grad;
    std::size_t copied = 0;
    for (auto& item : model->named_parameters()) {
      item.value().copy_(state.at(item.key()).toTensor());
      ++copied;
    }
    for (auto& item : model->named_buffers()) {
      item.value().copy_(state.at(item.key()).toTensor());
      ++copied;
    }
    CHECK(copied == state.size());  // every torchvision tensor has a counterpart
    model->eval();
    at::Tensor y = model->forward(saved.at("x").toTensor());
    CHECK(torch::allclose(y, saved.at("y").toTensor(), 1e-4, 1e-5));
  }
}
