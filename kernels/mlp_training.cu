// mlp_training.cu — the kernels and host code of streampool_mlp.hpp: a tiled matmul (with
// transposed operands for the backward pass), bias+ReLU, softmax cross-entropy, column sums for
// bias gradients, a fixed-order loss reduction and SGD. One thread owns each output element and
// loops in a fixed order, so results do not depend on scheduling: eager steps and graph replays
// produce bit-identical losses (Note [Deterministic kernels]).
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "streampool/allocator.hpp"
#include "streampool_mlp.hpp"

namespace streampool::kernels {
namespace {

// Note [Deterministic kernels]
// Floating-point addition is not associative, so a reduction whose order depends on timing
// (atomicAdd, split-K) can change the last bits from run to run, and the graph-replay test
// compares losses bit for bit. Every sum here is computed by one thread in index order (matmul
// dot products, column sums) or by a single block with a fixed shared-memory tree (the loss).
constexpr int tile = 16;

template <bool transpose_a, bool transpose_b>
__global__ void matmul_kernel(const float* a, const float* b, float* c, int m, int n, int k) {
  // c[m x n] = op(a)[m x k] * op(b)[k x n]; a is stored [m x k] or, transposed, [k x m]; b likewise.
  __shared__ float a_tile[tile][tile];
  __shared__ float b_tile[tile][tile];
  const int row = blockIdx.y * tile + threadIdx.y;
  const int col = blockIdx.x * tile + threadIdx.x;
  float sum = 0.0f;
  for (int base = 0; base < k; base += tile) {
    const int ak = base + threadIdx.x;
    const int bk = base + threadIdx.y;
    a_tile[threadIdx.y][threadIdx.x] =
        row < m && ak < k ? (transpose_a ? a[ak * m + row] : a[row * k + ak]) : 0.0f;
    b_tile[threadIdx.y][threadIdx.x] =
        col < n && bk < k ? (transpose_b ? b[col * k + bk] : b[bk * n + col]) : 0.0f;
    __syncthreads();
    for (int i = 0; i < tile; ++i) sum += a_tile[threadIdx.y][i] * b_tile[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = sum;
}

__global__ void bias_kernel(float* x, const float* bias, int rows, int cols, bool relu) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const float v = x[i] + bias[i % cols];
  x[i] = relu ? fmaxf(v, 0.0f) : v;
}

/// Per row: loss = logsumexp(z) - z[label]; dz = (softmax(z) - onehot(label)) / rows.
__global__ void softmax_xent_kernel(const float* z, const std::int32_t* labels, float* dz, float* row_loss, int rows,
                                    int cols) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* zr = z + r * cols;
  float peak = zr[0];
  for (int j = 1; j < cols; ++j) peak = fmaxf(peak, zr[j]);
  float total = 0.0f;
  for (int j = 0; j < cols; ++j) total += expf(zr[j] - peak);
  const int label = labels[r];
  row_loss[r] = logf(total) - (zr[label] - peak);
  for (int j = 0; j < cols; ++j) {
    dz[r * cols + j] = (expf(zr[j] - peak) / total - (j == label ? 1.0f : 0.0f)) / static_cast<float>(rows);
  }
}

/// One block of 256 threads: strided partial sums, then a fixed shared-memory tree.
__global__ void mean_kernel(const float* values, int count, float* out) {
  __shared__ float partial[256];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += values[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0] / static_cast<float>(count);
}

__global__ void column_sum_kernel(const float* x, float* out, int rows, int cols) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float sum = 0.0f;
  for (int r = 0; r < rows; ++r) sum += x[r * cols + j];
  out[j] = sum;
}

/// dx *= (activation > 0): the ReLU backward, given the layer's output.
__global__ void relu_backward_kernel(float* dx, const float* activation, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count && activation[i] <= 0.0f) dx[i] = 0.0f;
}

__global__ void sgd_kernel(float* w, const float* grad, int count, float lr) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) w[i] -= lr * grad[i];
}

__device__ float hash_uniform(std::uint32_t seed, std::uint32_t index) {  // in [-1, 1)
  std::uint32_t x = seed * 0x9e3779b9u ^ (index + 0x7f4a7c15u);
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void uniform_kernel(float* x, int count, std::uint32_t seed, float scale) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) x[i] = scale * hash_uniform(seed, static_cast<std::uint32_t>(i));
}

__global__ void labels_kernel(std::int32_t* labels, int rows, int classes) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) labels[r] = (r * 7 + 3) % classes;
}

unsigned blocks_for(int count) { return static_cast<unsigned>((count + 255) / 256); }

void launched(const char* what) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string("mlp_training: ") + what + ": " + cudaGetErrorName(error) + ": " +
                             cudaGetErrorString(error));
  }
}

template <bool ta, bool tb>
void matmul(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((n + tile - 1) / tile), static_cast<unsigned>((m + tile - 1) / tile));
  matmul_kernel<ta, tb><<<grid, dim3(tile, tile), 0, stream>>>(a, b, c, m, n, k);
  launched("matmul");
}

/// The activations and gradients of one step: allocated at its start, freed at its end (also when
/// a launch or an allocation throws halfway).
class step_memory {
 public:
  explicit step_memory(allocator& alloc, void* stream) : alloc_(alloc), stream_(stream) {}
  ~step_memory() {
    for (int i = count_ - 1; i >= 0; --i) {
      try {
        alloc_.deallocate(ptrs_[i]);
      } catch (...) {
        // Freeing inside a failing step: the allocator reports its own problems.
      }
    }
  }
  step_memory(const step_memory&) = delete;
  step_memory& operator=(const step_memory&) = delete;
  float* floats(int count) {
    void* p = alloc_.allocate(static_cast<std::size_t>(count) * sizeof(float), stream_);
    ptrs_[count_++] = p;
    return static_cast<float*>(p);
  }

 private:
  allocator& alloc_;
  void* stream_;
  void* ptrs_[mlp_trainer::allocations_per_step()] = {};
  int count_ = 0;
};

}  // namespace

mlp_trainer::mlp_trainer(allocator& alloc, const mlp_shape& shape, std::uint32_t seed, void* stream)
    : alloc_(&alloc), shape_(shape), seed_(seed) {
  const auto floats = [&](int count) {
    return static_cast<float*>(alloc.allocate(static_cast<std::size_t>(count) * sizeof(float), stream));
  };
  try {
    w1_ = floats(shape.inputs * shape.hidden);
    b1_ = floats(shape.hidden);
    w2_ = floats(shape.hidden * shape.hidden);
    b2_ = floats(shape.hidden);
    w3_ = floats(shape.hidden * shape.classes);
    b3_ = floats(shape.classes);
    inputs_ = floats(shape.batch * shape.inputs);
    labels_ = static_cast<std::int32_t*>(alloc.allocate(sizeof(std::int32_t) * shape.batch, stream));
    loss_ = floats(1);
    initialise(stream);
  } catch (...) {
    release();
    throw;
  }
}

mlp_trainer::~mlp_trainer() { release(); }

void mlp_trainer::release() noexcept {
  for (void* p : {static_cast<void*>(w1_), static_cast<void*>(b1_), static_cast<void*>(w2_), static_cast<void*>(b2_),
                  static_cast<void*>(w3_), static_cast<void*>(b3_), static_cast<void*>(inputs_),
                  static_cast<void*>(labels_), static_cast<void*>(loss_)}) {
    try {
      alloc_->deallocate(p);  // nullptr is a no-op
    } catch (...) {
      // A destructor cannot report it.
    }
  }
  w1_ = b1_ = w2_ = b2_ = w3_ = b3_ = inputs_ = loss_ = nullptr;
  labels_ = nullptr;
}

void mlp_trainer::initialise(void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const mlp_shape& d = shape_;
  const auto init = [&](float* x, int count, std::uint32_t salt, float scale) {
    uniform_kernel<<<blocks_for(count), 256, 0, s>>>(x, count, seed_ * 16u + salt, scale);
    launched("initialise");
  };
  init(w1_, d.inputs * d.hidden, 1, std::sqrt(6.0f / static_cast<float>(d.inputs + d.hidden)));
  init(b1_, d.hidden, 2, 0.0f);
  init(w2_, d.hidden * d.hidden, 3, std::sqrt(6.0f / static_cast<float>(2 * d.hidden)));
  init(b2_, d.hidden, 4, 0.0f);
  init(w3_, d.hidden * d.classes, 5, std::sqrt(6.0f / static_cast<float>(d.hidden + d.classes)));
  init(b3_, d.classes, 6, 0.0f);
  init(inputs_, d.batch * d.inputs, 7, 1.0f);
  labels_kernel<<<blocks_for(d.batch), 256, 0, s>>>(labels_, d.batch, d.classes);
  launched("labels");
}

void mlp_trainer::reset_parameters(void* stream) { initialise(stream); }

void mlp_trainer::step(void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const int nb = shape_.batch, ni = shape_.inputs, nh = shape_.hidden, nc = shape_.classes;
  step_memory m(*alloc_, stream);
  float* a1 = m.floats(nb * nh);
  float* a2 = m.floats(nb * nh);
  float* logits = m.floats(nb * nc);
  float* dz = m.floats(nb * nc);
  float* row_loss = m.floats(nb);
  float* dw3 = m.floats(nh * nc);
  float* db3 = m.floats(nc);
  float* da2 = m.floats(nb * nh);
  float* dw2 = m.floats(nh * nh);
  float* db2 = m.floats(nh);
  float* da1 = m.floats(nb * nh);
  float* dw1 = m.floats(ni * nh);
  float* db1 = m.floats(nh);

  // Forward.
  matmul<false, false>(inputs_, w1_, a1, nb, nh, ni, s);
  bias_kernel<<<blocks_for(nb * nh), 256, 0, s>>>(a1, b1_, nb, nh, true);
  matmul<false, false>(a1, w2_, a2, nb, nh, nh, s);
  bias_kernel<<<blocks_for(nb * nh), 256, 0, s>>>(a2, b2_, nb, nh, true);
  matmul<false, false>(a2, w3_, logits, nb, nc, nh, s);
  bias_kernel<<<blocks_for(nb * nc), 256, 0, s>>>(logits, b3_, nb, nc, false);
  launched("forward");
  softmax_xent_kernel<<<blocks_for(nb), 256, 0, s>>>(logits, labels_, dz, row_loss, nb, nc);
  mean_kernel<<<1, 256, 0, s>>>(row_loss, nb, loss_);
  launched("loss");

  // Backward.
  matmul<true, false>(a2, dz, dw3, nh, nc, nb, s);
  column_sum_kernel<<<blocks_for(nc), 256, 0, s>>>(dz, db3, nb, nc);
  matmul<false, true>(dz, w3_, da2, nb, nh, nc, s);
  relu_backward_kernel<<<blocks_for(nb * nh), 256, 0, s>>>(da2, a2, nb * nh);
  matmul<true, false>(a1, da2, dw2, nh, nh, nb, s);
  column_sum_kernel<<<blocks_for(nh), 256, 0, s>>>(da2, db2, nb, nh);
  matmul<false, true>(da2, w2_, da1, nb, nh, nh, s);
  relu_backward_kernel<<<blocks_for(nb * nh), 256, 0, s>>>(da1, a1, nb * nh);
  matmul<true, false>(inputs_, da1, dw1, ni, nh, nb, s);
  column_sum_kernel<<<blocks_for(nh), 256, 0, s>>>(da1, db1, nb, nh);
  launched("backward");

  // SGD.
  const float lr = learning_rate;
  const auto update = [&](float* w, const float* g, int count) {
    sgd_kernel<<<blocks_for(count), 256, 0, s>>>(w, g, count, lr);
  };
  update(w1_, dw1, ni * nh);
  update(b1_, db1, nh);
  update(w2_, dw2, nh * nh);
  update(b2_, db2, nh);
  update(w3_, dw3, nh * nc);
  update(b3_, db3, nc);
  launched("sgd");
}  // step_memory frees the activations and gradients here, on `stream`'s order

float mlp_trainer::loss(void* stream) const {
  float host = 0.0f;
  const auto s = static_cast<cudaStream_t>(stream);
  cudaError_t error = cudaMemcpyAsync(&host, loss_, sizeof host, cudaMemcpyDeviceToHost, s);
  if (error == cudaSuccess) error = cudaStreamSynchronize(s);
  if (error != cudaSuccess) {
    throw std::runtime_error(std::string("mlp_training: reading the loss: ") + cudaGetErrorName(error) + ": " +
                             cudaGetErrorString(error));
  }
  return host;
}

}  // namespace streampool::kernels
