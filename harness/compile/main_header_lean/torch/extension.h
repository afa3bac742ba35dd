// kb-harness (harness/compile/compiler.py, build.main_header: lean): a main.cpp's torch/extension.h
// without torch's C++ frontend (torch/all.h: nn, optim, data, serialize, jit, ...): torch/types.h
// (the tensor, ATen's operators, torch's factories) and what torch/python.h includes for the
// bindings, every pybind11 type caster torch defines among them (torch/csrc/utils/pybind.h). A
// main.cpp that uses the frontend fails with it and is compiled again with torch's own header.
#pragma once
#include <torch/types.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/python_headers.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/utils/python_numbers.h>
#include <torch/csrc/utils/python_tuples.h>
