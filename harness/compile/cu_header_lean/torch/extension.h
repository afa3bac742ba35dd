// kb-harness (harness/compile/compiler.py, build.cu_header: lean): a cuda.cu's torch/extension.h
// is this folder's torch/types.h (its comment says what that holds and what happens where it is not
// enough).
#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)
#pragma once
#include <torch/types.h>
#else
#error "This file should not be included when either TORCH_STABLE_ONLY or TORCH_TARGET_VERSION is defined."
#endif
