#include "workers/resnet.hpp"

#include <fmt/format.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/init.h>

#include "common/error.hpp"

namespace ddprun::workers {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                std::int64_t padding) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
}

nn::Conv2d conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return conv(in, out, 3, stride, 1);
}

nn::Conv2d conv1x1(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return conv(in, out, 1, stride, 0);
}

torch::Tensor relu_inplace(const torch::Tensor& x) {
  return torch::nn::functional::relu(x, torch::nn::functional::ReLUFuncOptions().inplace(true));
}

}  // namespace

ResNetSpec resnet_spec(const std::string& arch) {
  if (arch == "resnet18") return {false, {2, 2, 2, 2}};
  if (arch == "resnet34") return {false, {3, 4, 6, 3}};
  if (arch == "resnet50") return {true, {3, 4, 6, 3}};
  if (arch == "resnet101") return {true, {3, 4, 23, 3}};
  if (arch == "resnet152") return {true, {3, 8, 36, 3}};
  throw ConfigError(fmt::format("unknown architecture '{}' (one of resnet18, resnet34, "
                                "resnet50, resnet101, resnet152)", arch));
}

BasicBlockImpl::BasicBlockImpl(std::int64_t in_planes, std::int64_t planes, std::int64_t stride,
                               nn::Sequential downsample)
    : conv1_(register_module("conv1", conv3x3(in_planes, planes, stride))),
      bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
      conv2_(register_module("conv2", conv3x3(planes, planes, 1))),
      bn2_(register_module("bn2", nn::BatchNorm2d(planes))) {
  if (downsample) downsample_ = register_module("downsample", std::move(downsample));
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor identity = downsample_ ? downsample_->forward(x) : x;
  torch::Tensor out = relu_inplace(bn1_(conv1_(x)));
  out = bn2_(conv2_(out));
  out += identity;
  return relu_inplace(out);
}

BottleneckImpl::BottleneckImpl(std::int64_t in_planes, std::int64_t planes, std::int64_t stride,
                               nn::Sequential downsample)
    : conv1_(register_module("conv1", conv1x1(in_planes, planes, 1))),
      bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
      conv2_(register_module("conv2", conv3x3(planes, planes, stride))),
      bn2_(register_module("bn2", nn::BatchNorm2d(planes))),
      conv3_(register_module("conv3", conv1x1(planes, planes * kExpansion, 1))),
      bn3_(register_module("bn3", nn::BatchNorm2d(planes * kExpansion))) {
  if (downsample) downsample_ = register_module("downsample", std::move(downsample));
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  torch::Tensor identity = downsample_ ? downsample_->forward(x) : x;
  torch::Tensor out = relu_inplace(bn1_(conv1_(x)));
  out = relu_inplace(bn2_(conv2_(out)));
  out = bn3_(conv3_(out));
  out += identity;
  return relu_inplace(out);
}

ResNetImpl::ResNetImpl(const std::string& arch, std::int64_t num_classes) {
  const ResNetSpec spec = resnet_spec(arch);
  if (num_classes < 1) throw ConfigError(fmt::format("num_classes={}: must be positive", num_classes));
  const std::int64_t expansion = spec.bottleneck ? BottleneckImpl::kExpansion
                                                 : BasicBlockImpl::kExpansion;
  // Registration order is torchvision's, so parameters() comes out in the same order.
  conv1_ = register_module("conv1", conv(3, 64, 7, 2, 3));
  bn1_ = register_module("bn1", nn::BatchNorm2d(64));
  maxpool_ = register_module("maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  layer1_ = register_module("layer1", make_layer(spec, 64, spec.blocks[0], 1));
  layer2_ = register_module("layer2", make_layer(spec, 128, spec.blocks[1], 2));
  layer3_ = register_module("layer3", make_layer(spec, 256, spec.blocks[2], 2));
  layer4_ = register_module("layer4", make_layer(spec, 512, spec.blocks[3], 2));
  avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1})));
  fc_ = register_module("fc", nn::Linear(512 * expansion, num_classes));

  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* b = module->as<nn::BatchNorm2d>()) {
      nn::init::ones_(b->weight);
      nn::init::zeros_(b->bias);
    }
  }
}

nn::Sequential ResNetImpl::make_layer(const ResNetSpec& spec, std::int64_t planes, int blocks,
                                      std::int64_t stride) {
  const std::int64_t expansion = spec.bottleneck ? BottleneckImpl::kExpansion
                                                 : BasicBlockImpl::kExpansion;
  nn::Sequential layer;
  for (int i = 0; i < blocks; ++i) {
    const std::int64_t s = i == 0 ? stride : 1;
    nn::Sequential downsample{nullptr};
    if (i == 0 && (stride != 1 || in_planes_ != planes * expansion)) {
      downsample = nn::Sequential(conv1x1(in_planes_, planes * expansion, stride),
                                  nn::BatchNorm2d(planes * expansion));
    }
    if (spec.bottleneck) {
      layer->push_back(Bottleneck(in_planes_, planes, s, downsample));
    } else {
      layer->push_back(BasicBlock(in_planes_, planes, s, downsample));
    }
    in_planes_ = planes * expansion;
  }
  return layer;
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = maxpool_(relu_inplace(bn1_(conv1_(x))));
  x = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(x))));
  x = torch::flatten(avgpool_(x), 1);
  return fc_(x);
}

std::int64_t count_parameters(const torch::nn::Module& module) {
  std::int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace ddprun::workers
