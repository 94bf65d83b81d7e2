// settings_route.hpp — the torch-free string logic of how PyTorch's allocator settings reach
// streampool's extension allocator (module.cpp): which backend PyTorch's own variables choose, and
// a settings string without the pinned_* keys (PyTorch's host allocator keeps those).
#pragma once

#include <string>

#include "streampool/config.hpp"

namespace streampool::torch_ext {

/// The backend of the first `backend` key of `text` (PyTorch's variable as c10 reads it:
/// whitespace ignored); native when there is none or `text` is null.
[[nodiscard]] backend_kind backend_named_by(const char* text);
/// The backend PyTorch's variables choose: PYTORCH_CUDA_ALLOC_CONF if set, else PYTORCH_ALLOC_CONF.
[[nodiscard]] backend_kind pytorch_backend();
/// `env` without its pinned_* items (bracketed lists kept whole).
[[nodiscard]] std::string without_pinned_keys(const std::string& env);

}  // namespace streampool::torch_ext
