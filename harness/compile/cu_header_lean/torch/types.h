// kb-harness (harness/compile/compiler.py, build.cu_header: lean): the first header a recipe's
// cuda.cu is compiled with. Its torch/types.h (what load_inline prepends to every cuda.cu) and
// torch/extension.h (what the kernels include) are this: the tensor and its methods, TORCH_CHECK,
// the AT_DISPATCH macros, the device guard, and torch's own factories (torch::empty, zeros, ...:
// variable_factories.h as torch writes it, with the operator headers of the factories only, not
// every operator's). A .cu that uses more (an operator function, a tensor's +, torch/library.h,
// pybind11) fails to compile with it and is compiled again with torch/types.h (../cu_header), then
// with torch's own header where that fails too.
#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)
#pragma once

#ifndef AT_PER_OPERATOR_HEADERS
#define AT_PER_OPERATOR_HEADERS
#define KB_HARNESS_PER_OPERATOR_HEADERS
#endif

#include <ATen/core/Tensor.h>
#include <ATen/DeviceGuard.h>
#include <ATen/Dispatch.h>
#include <c10/core/TensorOptions.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/variable.h>

#include <optional>

#ifdef KB_HARNESS_PER_OPERATOR_HEADERS
#undef AT_PER_OPERATOR_HEADERS
#undef KB_HARNESS_PER_OPERATOR_HEADERS
#endif

// as torch/types.h declares them
namespace torch {

using namespace at;  // NOLINT

#if !defined(FBCODE_CAFFE2) && !defined(C10_NODEPRECATED)
using std::nullopt;   // NOLINT
using std::optional;  // NOLINT
#endif

using Dtype = at::ScalarType;

constexpr auto kUInt8 = at::kByte;
constexpr auto kInt8 = at::kChar;
constexpr auto kInt16 = at::kShort;
constexpr auto kInt32 = at::kInt;
constexpr auto kInt64 = at::kLong;
constexpr auto kFloat16 = at::kHalf;
constexpr auto kFloat32 = at::kFloat;
constexpr auto kFloat64 = at::kDouble;

constexpr auto kU8 = kUInt8;
constexpr auto kI8 = kInt8;
constexpr auto kI16 = kInt16;
constexpr auto kI32 = kInt32;
constexpr auto kI64 = kInt64;
constexpr auto kF16 = kFloat16;
constexpr auto kF32 = kFloat32;
constexpr auto kF64 = kFloat64;

}  // namespace torch

#else
#error "This file should not be included when either TORCH_STABLE_ONLY or TORCH_TARGET_VERSION is defined."
#endif
