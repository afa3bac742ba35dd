// kb-harness (harness/compile/compiler.py, build.cu_header): a recipe's cuda.cu is compiled first
// with this folder on its include path, so that its #include <torch/extension.h> reads only what
// load_inline prepends to every cuda.cu anyway, <torch/types.h>: the tensor, its operators and
// factories, without the C++ frontend (torch/all.h: nn, optim, data, jit, ...) and the Python
// bindings (torch/python.h: pybind11, Python.h), which a kernel's .cu seldom uses. Where it does,
// the compile fails and the recipe is compiled again without this folder (torch's own header).
#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)
#pragma once
#include <torch/types.h>
#else
#error "This file should not be included when either TORCH_STABLE_ONLY or TORCH_TARGET_VERSION is defined."
#endif
