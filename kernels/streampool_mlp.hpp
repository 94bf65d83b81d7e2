// streampool_mlp.hpp — a small, real training loop for the graph-capture proof (kernels/mlp_training.cu):
// a 3-layer MLP (inputs -> hidden -> hidden -> classes, ReLU) trained by SGD with softmax
// cross-entropy on one fixed batch. Parameters are allocated once; each step allocates its
// activations and gradients through a streampool::allocator on the step's stream and frees them at
// the end, as a framework does, so a step can be captured into a CUDA graph with capture_scope.
// Every kernel is deterministic (no atomics; reductions in a fixed order), so eager steps and
// graph replays give bit-identical losses. Streams are void* (cudaStream_t): no CUDA headers needed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace streampool {
class allocator;
}

namespace streampool::kernels {

struct mlp_shape {
  int batch = 256;
  int inputs = 128;
  int hidden = 256;
  int classes = 16;
};

class mlp_trainer {
 public:
  /// Allocates and initialises (deterministically from `seed`, on `stream`) the parameters, the
  /// batch, its labels and the loss scalar. `alloc` must outlive the trainer.
  /// @throws std::runtime_error when a kernel or copy fails; whatever `alloc` throws
  mlp_trainer(allocator& alloc, const mlp_shape& shape, std::uint32_t seed, void* stream);
  ~mlp_trainer();
  mlp_trainer(const mlp_trainer&) = delete;
  mlp_trainer& operator=(const mlp_trainer&) = delete;

  /// Puts the parameters back to their values at construction (same seed), on `stream`.
  void reset_parameters(void* stream);
  /// One training step on `stream`: allocate activations and gradients, forward, loss, backward,
  /// SGD update, free them. No host synchronisation or copy: capturable into a graph.
  void step(void* stream);
  /// Waits for `stream` and returns the loss computed by the last step (or replay).
  [[nodiscard]] float loss(void* stream) const;

  /// Allocations made (and freed) by one step.
  [[nodiscard]] static constexpr int allocations_per_step() noexcept { return 13; }
  [[nodiscard]] const mlp_shape& shape() const noexcept { return shape_; }

  float learning_rate = 0.5f;

 private:
  void initialise(void* stream);
  /// Frees whatever was allocated (constructor failure and destructor); never throws.
  void release() noexcept;

  allocator* alloc_;
  mlp_shape shape_;
  std::uint32_t seed_;
  // Parameters (layer l: weights [fan_in x fan_out] row-major, bias [fan_out]).
  float* w1_ = nullptr;
  float* b1_ = nullptr;
  float* w2_ = nullptr;
  float* b2_ = nullptr;
  float* w3_ = nullptr;
  float* b3_ = nullptr;
  float* inputs_ = nullptr;      ///< [batch x inputs]
  std::int32_t* labels_ = nullptr;  ///< [batch]
  float* loss_ = nullptr;        ///< scalar written by every step
};

}  // namespace streampool::kernels
