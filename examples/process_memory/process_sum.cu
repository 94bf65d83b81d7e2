// examples/process_memory/process_sum.cu — C++ code that draws on the process's one streampool
// allocator (streampool/process_allocator.hpp): a cuda::mr resource holds the input, CUB's
// temporary storage comes from cub_call_with_temp_storage, both through libstreampool.so's C API,
// which serves them from PyTorch's allocator once streampool.install() has taken the extension
// route (docs/integrations/thrust-cccl.md, "One allocator per process"). Built as a shared library
// and called from Python by python/tests/gpu_process_memory.py:
//   nvcc -std=c++20 -shared -Xcompiler -fPIC -I include examples/process_memory/process_sum.cu \
//        -L DIR_OF_LIBSTREAMPOOL -lstreampool -o libprocess_sum.so
#include <cub/device/device_reduce.cuh>

#include <cstdio>

#include "streampool/cuda_mr_resource.hpp"
#include "streampool/process_allocator.hpp"
#include "streampool/thrust_allocator.hpp"

namespace {

__global__ void fill(float* data, int n, float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = value;
}

thread_local char last_message[512];

}  // namespace

extern "C" {

/// Sums n copies of `value` on `stream` in memory of the process allocator; 0 on success, else -1
/// and process_sum_error() says why.
int process_sum(int n, float value, void* stream, double* sum) {
  try {
    auto s = static_cast<cudaStream_t>(stream);
    streampool::process_async_resource resource(streampool::process_memory(), stream);
    auto* data = static_cast<float*>(resource.allocate_async(sizeof(float) * n, 256, ::cuda::stream_ref(s)));
    auto* out = static_cast<float*>(resource.allocate_async(sizeof(float), 256, ::cuda::stream_ref(s)));
    fill<<<(n + 255) / 256, 256, 0, s>>>(data, n, value);
    const cudaError_t err = streampool::cub_call_with_temp_storage(
        streampool::process_memory(), stream,
        [&](void* tmp, std::size_t& bytes) { return cub::DeviceReduce::Sum(tmp, bytes, data, out, n, s); });
    float host = 0;
    if (err == cudaSuccess) cudaMemcpyAsync(&host, out, sizeof host, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    resource.deallocate_async(data, sizeof(float) * n, 256, ::cuda::stream_ref(s));
    resource.deallocate_async(out, sizeof(float), 256, ::cuda::stream_ref(s));
    if (err != cudaSuccess) {
      std::snprintf(last_message, sizeof last_message, "cub::DeviceReduce::Sum: %s", cudaGetErrorString(err));
      return -1;
    }
    *sum = host;
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(last_message, sizeof last_message, "%s", e.what());
    return -1;
  }
}

const char* process_sum_error() { return last_message; }

}  // extern "C"
