// cuda_driver_test.cpp — the real driver's behaviour that does not depend on having a GPU:
// construction never fails, describe() names runtime and driver-API codes, and on a machine
// without a driver or device every call fails cleanly with the reason (these skip on a GPU
// machine, where driver_contract_test covers the real calls).
#include <gtest/gtest.h>

#include <string>

#include "driver_test_support.hpp"
#include "streampool/driver.hpp"
#include "streampool/errors.hpp"

namespace streampool::testing {
namespace {

class cuda_driver_test : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_THROW(drv_ = make_cuda_driver());
    ASSERT_NE(drv_, nullptr);
    counted_ = drv_->device_count(&count_);
  }
  [[nodiscard]] bool has_device() const { return counted_.ok() && count_ > 0; }

  std::shared_ptr<driver> drv_;
  int count_ = -1;
  drv_result counted_{};
};

/// The no-driver behaviour; skipped (in SetUp, so no test body runs) where a device exists.
class cuda_driver_without_device : public cuda_driver_test {
 protected:
  void SetUp() override {
    cuda_driver_test::SetUp();
    if (has_device()) {
      GTEST_SKIP() << "a CUDA device is present; the real calls are covered by driver_contract";
    }
  }
};

TEST_F(cuda_driver_test, IsNamedCuda) { EXPECT_EQ(drv_->name(), "cuda"); }

TEST_F(cuda_driver_test, DescribesRuntimeErrorsByNameAndText) {
  EXPECT_EQ(drv_->describe({status::out_of_memory, 2}), "cudaErrorMemoryAllocation: out of memory");
  EXPECT_EQ(drv_->describe({status::invalid_value, 1}), "cudaErrorInvalidValue: invalid argument");
  EXPECT_EQ(drv_->describe({}), "cudaSuccess: no error");
  EXPECT_EQ(drv_->describe({status::illegal_in_capture, 0}), "illegal_in_capture") << "no native code";
}

TEST_F(cuda_driver_test, DescribesDriverApiErrorsApartFromRuntimeOnes) {
  const drv_result driver_oom{status::out_of_memory, 100000 + 2};  // CUDA_ERROR_OUT_OF_MEMORY
  if (has_device()) {
    EXPECT_EQ(drv_->describe(driver_oom), "CUDA_ERROR_OUT_OF_MEMORY: out of memory");
  } else {
    EXPECT_EQ(drv_->describe(driver_oom), "CUresult 2 (out_of_memory)") << "no driver to name it";
  }
}

TEST_F(cuda_driver_without_device, DeviceCountSaysWhy) {
  EXPECT_EQ(counted_.code, status::no_device);
  EXPECT_EQ(count_, 0);
  const std::string reason = drv_->describe(counted_);
  EXPECT_TRUE(reason.find("cudaErrorInsufficientDriver") != std::string::npos ||
              reason.find("cudaErrorNoDevice") != std::string::npos)
      << reason;
}

TEST_F(cuda_driver_without_device, EveryCallFailsCleanly) {
  void* ptr = reinterpret_cast<void*>(0x1);
  EXPECT_FALSE(drv_->malloc(0, mib, &ptr).ok());
  EXPECT_EQ(ptr, nullptr);
  ptr = reinterpret_cast<void*>(0x1);
  {
    const relaxed_thread_scope relaxed(*drv_, true);
    EXPECT_FALSE(drv_->malloc(0, mib, &ptr).ok()) << "relaxed path too";
  }
  EXPECT_EQ(ptr, nullptr);
  device_info info;
  EXPECT_FALSE(drv_->get_device_info(0, &info).ok());
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  EXPECT_FALSE(drv_->mem_get_info(0, &free_bytes, &total_bytes).ok());
  stream_t stream = nullptr;
  EXPECT_FALSE(drv_->stream_create(0, &stream).ok());
  mempool_t pool = nullptr;
  EXPECT_FALSE(drv_->pool_get_default(0, &pool).ok());
  void* va = reinterpret_cast<void*>(0x1);
  const drv_result reserved = drv_->vmm_reserve(0, 2 * mib, 0, &va);
  EXPECT_EQ(reserved.code, status::no_device) << drv_->describe(reserved);
  EXPECT_EQ(va, nullptr);
  vmm_handle_t handle = 7;
  EXPECT_FALSE(drv_->vmm_create(0, 2 * mib, &handle).ok());
  EXPECT_EQ(handle, 0u);
  EXPECT_FALSE(drv_->vmm_unmap(reinterpret_cast<void*>(0x200000), 2 * mib).ok());
}

TEST_F(cuda_driver_without_device, CheckThrowsTheRuntimeReason) {
  void* ptr = nullptr;
  try {
    check(*drv_, drv_->malloc(0, mib, &ptr), "cudaMalloc of 1.00 MiB");
    FAIL() << "check() did not throw";
  } catch (const cuda_error& thrown) {
    const std::string message = thrown.what();
    EXPECT_EQ(message.rfind("cudaMalloc of 1.00 MiB failed: cudaError", 0), 0u) << message;
    EXPECT_NE(thrown.native_status(), 0);
  }
}

}  // namespace
}  // namespace streampool::testing
