// tests/unit/torch_ext/settings_route_test.cpp — the torch-free part of how PyTorch's allocator
// settings reach the extension allocator (python/csrc/settings_route.cpp): the backend PyTorch's
// variable names (c10 reads its first `backend` key, whitespace ignored), and a runtime settings
// string with the pinned_* items left to PyTorch's host allocator.
#include <gtest/gtest.h>

#include "../../../python/csrc/settings_route.hpp"

namespace streampool::torch_ext {
namespace {

TEST(settings_route, BackendNamedByPyTorchsVariable) {
  EXPECT_EQ(backend_named_by(nullptr), backend_kind::native);
  EXPECT_EQ(backend_named_by(""), backend_kind::native);
  EXPECT_EQ(backend_named_by("expandable_segments:True"), backend_kind::native);
  EXPECT_EQ(backend_named_by("backend:cudaMallocAsync"), backend_kind::cuda_malloc_async);
  EXPECT_EQ(backend_named_by("max_split_size_mb:20, backend : cudaMallocAsync,release_lock_on_cudamalloc:none"),
            backend_kind::cuda_malloc_async);
  EXPECT_EQ(backend_named_by("backend:native,backend:cudaMallocAsync"), backend_kind::native) << "the first key";
  EXPECT_EQ(backend_named_by("mybackend:cudaMallocAsync"), backend_kind::native) << "a whole key only";
}

TEST(settings_route, PinnedItemsAreLeftToPyTorch) {
  EXPECT_EQ(without_pinned_keys(""), "");
  EXPECT_EQ(without_pinned_keys("pinned_use_cuda_host_register:True"), "");
  EXPECT_EQ(without_pinned_keys("max_split_size_mb:40, pinned_num_register_threads:8,garbage_collection_threshold:0.5"),
            "max_split_size_mb:40,garbage_collection_threshold:0.5");
  EXPECT_EQ(without_pinned_keys("roundup_power2_divisions:[64:8,>:1],pinned_use_background_threads:True"),
            "roundup_power2_divisions:[64:8,>:1]")
      << "a bracketed list stays whole";
}

}  // namespace
}  // namespace streampool::torch_ext
