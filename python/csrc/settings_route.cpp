// settings_route.cpp — see settings_route.hpp (Note [Runtime settings from PyTorch] and Note
// [PyTorch's config parsed before the swap] in module.cpp say where these are used).
#include "settings_route.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace streampool::torch_ext {

backend_kind backend_named_by(const char* text) {
  if (text == nullptr) return backend_kind::native;
  std::string compact;
  for (const char* c = text; *c != '\0'; ++c) {
    if (std::isspace(static_cast<unsigned char>(*c)) == 0) compact += *c;
  }
  std::size_t start = 0;
  while (start <= compact.size()) {
    const std::size_t end = std::min(compact.find(',', start), compact.size());
    const std::string item = compact.substr(start, end - start);
    if (item.rfind("backend:", 0) == 0) {
      return item.substr(8) == "cudaMallocAsync" ? backend_kind::cuda_malloc_async : backend_kind::native;
    }
    start = end + 1;
  }
  return backend_kind::native;
}

backend_kind pytorch_backend() {
  const char* text = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  if (text == nullptr) text = std::getenv("PYTORCH_ALLOC_CONF");
  return backend_named_by(text);
}

std::string without_pinned_keys(const std::string& env) {
  std::string out;
  std::size_t depth = 0;
  std::string item;
  const auto flush = [&] {
    const std::size_t first = item.find_first_not_of(" \t");
    if (first != std::string::npos && item.compare(first, 7, "pinned_") != 0) out += (out.empty() ? "" : ",") + item;
    item.clear();
  };
  for (const char c : env) {
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
    if (c == ',' && depth == 0) {
      flush();
    } else {
      item += c;
    }
  }
  flush();
  return out;
}

}  // namespace streampool::torch_ext
