#pragma once
// torchvision's ResNets (v1.5: the stride is on the 3x3 convolution of a bottleneck) built from
// torch::nn modules with torchvision's module names, so that the state-dict keys
// ("layer1.0.conv1.weight", "layer2.0.downsample.1.running_mean", "fc.bias", ...), the layer
// shapes, the parameter counts and the initialization (Kaiming normal, fan_out, for
// convolutions; BatchNorm weight 1 and bias 0; PyTorch's default Linear init) are the same.

#include <array>
#include <cstdint>
#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

namespace ddprun::workers {

struct ResNetSpec {
  bool bottleneck = false;        // BasicBlock (18, 34) or Bottleneck (50, 101, 152)
  std::array<int, 4> blocks{};    // blocks in layer1..layer4
};

// Throws ConfigError for a name that is not resnet18/34/50/101/152.
ResNetSpec resnet_spec(const std::string& arch);

// conv3x3 -> bn -> relu -> conv3x3 -> bn, plus the shortcut, relu.
class BasicBlockImpl final : public torch::nn::Module {
 public:
  static constexpr std::int64_t kExpansion = 1;
  BasicBlockImpl(std::int64_t in_planes, std::int64_t planes, std::int64_t stride,
                 torch::nn::Sequential downsample);
  torch::Tensor forward(torch::Tensor x);

 private:
  // Declared in registration order (torchvision's), which fixes the order of parameters().
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::Conv2d conv2_{nullptr};
  torch::nn::BatchNorm2d bn2_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

// conv1x1 -> bn -> relu -> conv3x3 (stride) -> bn -> relu -> conv1x1 (x4) -> bn, shortcut, relu.
class BottleneckImpl final : public torch::nn::Module {
 public:
  static constexpr std::int64_t kExpansion = 4;
  BottleneckImpl(std::int64_t in_planes, std::int64_t planes, std::int64_t stride,
                 torch::nn::Sequential downsample);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::Conv2d conv2_{nullptr};
  torch::nn::BatchNorm2d bn2_{nullptr};
  torch::nn::Conv2d conv3_{nullptr};
  torch::nn::BatchNorm2d bn3_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

class ResNetImpl final : public torch::nn::Module {
 public:
  // Throws ConfigError for an unknown arch or num_classes < 1.
  ResNetImpl(const std::string& arch, std::int64_t num_classes);
  // x: [N, 3, H, W] -> logits [N, num_classes].
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Sequential make_layer(const ResNetSpec& spec, std::int64_t planes, int blocks,
                                   std::int64_t stride);

  std::int64_t in_planes_ = 64;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::MaxPool2d maxpool_{nullptr};
  torch::nn::Sequential layer1_{nullptr}, layer2_{nullptr}, layer3_{nullptr}, layer4_{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool_{nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet);

// Number of scalar parameters (not buffers), as sum(p.numel() for p in model.parameters()).
std::int64_t count_parameters(const torch::nn::Module& module);

}  // namespace ddprun::workers
