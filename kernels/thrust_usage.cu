// thrust_usage.cu — Thrust, CUB and cuda::mr on streampool memory: the adapters of
// streampool/thrust_allocator.hpp and streampool/cuda_mr_resource.hpp in real use (a device_vector,
// a sort whose temporaries come from streampool, a CUB reduction, a cuda::mr resource_ref). Built
// with -std=c++20 for sm_90 only (kernels/CMakeLists.txt); one file to keep nvcc time small.
#include <cuda_runtime.h>

#include <cub/device/device_reduce.cuh>
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/reduce.h>
#include <thrust/sort.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/system_error.h>
#include <thrust/tabulate.h>
#include <thrust/transform_reduce.h>

#include <exception>
#include <string>
#include <vector>

#include "streampool/cuda_mr_resource.hpp"
#include "streampool/thrust_allocator.hpp"
#include "streampool_thrust_usage.hpp"

namespace streampool::kernels {
namespace {

thread_local std::string last_error;

/// Runs `body` (which returns 0 or a cudaError_t) and turns exceptions into codes + a message.
template <typename F>
int guarded(const char* what, F&& body) {
  try {
    const int code = body();
    last_error = code == 0 ? "" : std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(code));
    return code;
  } catch (const thrust::system_error& e) {
    last_error = std::string(what) + ": thrust: " + e.what();
    return e.code().value() > 0 ? e.code().value() : static_cast<int>(cudaErrorUnknown);
  } catch (const std::exception& e) {
    last_error = std::string(what) + ": " + e.what();
    return -1;
  }
}

struct scrambled {
  __host__ __device__ std::uint32_t operator()(std::size_t i) const {
    std::uint64_t x = static_cast<std::uint64_t>(i) * 0x9e3779b97f4a7c15ULL;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    return static_cast<std::uint32_t>(x);
  }
};

struct widen {
  __host__ __device__ std::uint64_t operator()(std::uint32_t v) const { return v; }
};

struct is_out_of_order {
  const std::uint32_t* data;
  __host__ __device__ int operator()(std::size_t i) const { return data[i] > data[i + 1] ? 1 : 0; }
};

__global__ void iota_kernel(std::uint64_t* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = i + 1;
  }
}

__global__ void fill_bytes_kernel(unsigned char* p, std::size_t n, unsigned char seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = static_cast<unsigned char>(seed + i * 7);
  }
}

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 1024 ? (blocks == 0 ? 1 : blocks) : 1024);
}

int check_bytes(const void* device_ptr, std::size_t n, unsigned char seed, cudaStream_t stream, bool* ok) {
  std::vector<unsigned char> host(n);
  if (const cudaError_t e = cudaMemcpyAsync(host.data(), device_ptr, n, cudaMemcpyDeviceToHost, stream)) return e;
  if (const cudaError_t e = cudaStreamSynchronize(stream)) return e;
  for (std::size_t i = 0; i < n; ++i) {
    if (host[i] != static_cast<unsigned char>(seed + i * 7)) {
      *ok = false;
      return 0;
    }
  }
  return 0;
}

}  // namespace

int thrust_sort_with_streampool(allocator& alloc, std::size_t n, void* stream, bool* sorted_ok) {
  *sorted_ok = false;
  return guarded("thrust_sort_with_streampool", [&]() -> int {
    using vector = thrust::device_vector<std::uint32_t, thrust_allocator<std::uint32_t>>;
    const auto s = static_cast<cudaStream_t>(stream);
    // The vector's own constructor/destructor work runs on the legacy default stream and is
    // synchronous; every algorithm below runs on `stream` and takes its temporaries from `alloc`.
    vector v(n, thrust_allocator<std::uint32_t>(alloc, stream));
    const auto policy = thrust::cuda::par(thrust_allocator<char>(alloc, stream)).on(s);
    thrust::tabulate(policy, v.begin(), v.end(), scrambled{});
    const std::uint64_t sum_before =
        thrust::transform_reduce(policy, v.begin(), v.end(), widen{}, std::uint64_t{0}, thrust::plus<std::uint64_t>{});
    thrust::sort(policy, v.begin(), v.end());
    const std::uint64_t sum_after =
        thrust::transform_reduce(policy, v.begin(), v.end(), widen{}, std::uint64_t{0}, thrust::plus<std::uint64_t>{});
    const std::uint32_t* raw = thrust::raw_pointer_cast(v.data());
    const int inversions =
        n < 2 ? 0
              : thrust::transform_reduce(policy, thrust::counting_iterator<std::size_t>(0),
                                         thrust::counting_iterator<std::size_t>(n - 1), is_out_of_order{raw}, 0,
                                         thrust::plus<int>{});
    if (const cudaError_t e = cudaStreamSynchronize(s)) return e;
    // One element may legitimately be 0, so only longer vectors must have a non-zero sum.
    *sorted_ok = inversions == 0 && sum_before == sum_after && (n < 2 || sum_before != 0);
    return 0;
  });
}

int cub_reduce_with_streampool(allocator& alloc, std::size_t n, void* stream, std::uint64_t* sum,
                               std::size_t* temp_bytes) {
  *sum = 0;
  *temp_bytes = 0;
  return guarded("cub_reduce_with_streampool", [&]() -> int {
    const auto s = static_cast<cudaStream_t>(stream);
    temp_storage in(alloc, n * sizeof(std::uint64_t), stream);
    temp_storage out(alloc, sizeof(std::uint64_t), stream);
    auto* d_in = static_cast<std::uint64_t*>(in.get());
    auto* d_out = static_cast<std::uint64_t*>(out.get());
    iota_kernel<<<grid_for(n), 256, 0, s>>>(d_in, n);
    if (const cudaError_t e = cudaGetLastError()) return e;
    const cudaError_t e = cub_call_with_temp_storage(alloc, stream, [&](void* tmp, std::size_t& bytes) {
      const cudaError_t status = cub::DeviceReduce::Sum(tmp, bytes, d_in, d_out, static_cast<int>(n), s);
      *temp_bytes = bytes;
      return status;
    });
    if (e != cudaSuccess) return e;
    if (const cudaError_t c = cudaMemcpyAsync(sum, d_out, sizeof(std::uint64_t), cudaMemcpyDeviceToHost, s)) return c;
    return cudaStreamSynchronize(s);
  });
}

int mr_resource_roundtrip(allocator& alloc, std::size_t bytes, void* stream, void* other_stream, bool* ok) {
  *ok = false;
  return guarded("mr_resource_roundtrip", [&]() -> int {
    const auto s = static_cast<cudaStream_t>(stream);
    const auto other = static_cast<cudaStream_t>(other_stream);
    cuda_async_resource resource(alloc);
    bool all_ok = true;

    // Stream-ordered: allocate on s, written on s, read on `other`, freed after `other`'s work.
    ::cuda::mr::async_resource_ref<::cuda::mr::device_accessible> async_ref(resource);
    void* p = async_ref.allocate_async(bytes, 256, ::cuda::stream_ref(s));
    fill_bytes_kernel<<<grid_for(bytes), 256, 0, s>>>(static_cast<unsigned char*>(p), bytes, 11);
    if (const cudaError_t e = cudaGetLastError()) return e;
    if (const cudaError_t e = cudaStreamSynchronize(s)) return e;
    if (const int e = check_bytes(p, bytes, 11, other, &all_ok)) return e;
    async_ref.deallocate_async(p, bytes, 256, ::cuda::stream_ref(other));

    // Synchronous resource_ref on the legacy default stream.
    ::cuda::mr::resource_ref<::cuda::mr::device_accessible> sync_ref(resource);
    void* q = sync_ref.allocate(bytes, 512);
    fill_bytes_kernel<<<grid_for(bytes), 256, 0, nullptr>>>(static_cast<unsigned char*>(q), bytes, 29);
    if (const cudaError_t e = cudaGetLastError()) return e;
    if (const int e = check_bytes(q, bytes, 29, nullptr, &all_ok)) return e;
    sync_ref.deallocate(q, bytes, 512);

    // Alignments above 512 are refused, not silently ignored.
    bool refused = false;
    try {
      (void)resource.allocate(bytes, 4096);
    } catch (const error&) {
      refused = true;
    }
    *ok = all_ok && refused;
    return 0;
  });
}

const char* thrust_usage_last_error() { return last_error.c_str(); }

}  // namespace streampool::kernels
