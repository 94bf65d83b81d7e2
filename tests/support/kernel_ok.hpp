// kernel_ok.hpp — KERNEL_OK(call): asserts that a launcher of kernels/ (streampool_kernels.hpp,
// which returns a cudaError_t as int) succeeded, naming the call and CUDA's text otherwise. For
// the GPU tests.
#pragma once

#include <gtest/gtest.h>

#include "streampool_kernels.hpp"

#define KERNEL_OK(call)                                                 \
  do {                                                                  \
    const int code_ = (call);                                           \
    ASSERT_EQ(code_, 0) << #call << ": " << kernels::error_text(code_); \
  } while (0)
