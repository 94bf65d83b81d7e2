// workload_trainloop.cpp — a synthetic transformer training loop (no kernels): weights, their
// gradients and two optimizer states are allocated once; each step draws a batch in {4, 8, 16}
// and a sequence length in [64, 1024], allocates each layer's saved activations in layer order
// (plus short-lived temporaries), frees them in reverse during the backward pass, then runs
// optimizer temporaries. The shapes change every step, as with variable-length batches, which is
// what fragments a caching allocator (cf. the encoder_varlen trace).
#include <random>

#include "workloads.hpp"

namespace streampool::bench {
namespace {

class tracker {
 public:
  explicit tracker(allocator& alloc) : alloc_(alloc) {}
  void* get(std::size_t bytes) {
    void* ptr = alloc_.allocate(bytes, nullptr, 0);
    live_ += bytes;
    counts.peak_requested = std::max(counts.peak_requested, live_);
    ++counts.ops;
    return ptr;
  }
  void put(void* ptr, std::size_t bytes) {
    alloc_.deallocate(ptr);
    live_ -= bytes;
    ++counts.ops;
  }
  workload_counts counts;

 private:
  allocator& alloc_;
  std::size_t live_ = 0;
};

struct tensor {
  void* ptr;
  std::size_t bytes;
};

}  // namespace

workload_counts workload_trainloop(allocator& alloc, const driver_instance&, const workload_params& params) {
  const int steps = params.steps != 0 ? params.steps : 20;
  if (params.layers < 1 || params.hidden < 16) throw usage_error("workload trainloop: --layers >= 1, --hidden >= 16");
  const auto h = static_cast<std::size_t>(params.hidden);
  constexpr std::size_t heads = 16, half = 2, single = 4;  // fp16 activations, fp32 weights
  tracker mem(alloc);
  std::mt19937_64 rng(params.seed);
  std::uniform_int_distribution<std::size_t> batch_pick(0, 2), seq_dist(64, 1024);

  // Per layer: qkv (3h x h), out (h x h), ffn up (4h x h), ffn down (h x 4h), two layer norms.
  const std::vector<std::size_t> weight_shapes = {3 * h * h, h * h, 4 * h * h, 4 * h * h, 2 * h, 2 * h};
  std::vector<tensor> persistent;
  for (int l = 0; l < params.layers; ++l) {
    for (const std::size_t elems : weight_shapes) persistent.push_back({mem.get(elems * single), elems * single});
  }
  const std::size_t weights = persistent.size();
  for (int step = 0; step < steps; ++step) {
    const std::size_t b = std::size_t{4} << batch_pick(rng), s = seq_dist(rng), tokens = b * s;
    std::vector<tensor> saved;
    auto keep = [&](std::size_t bytes) { saved.push_back({mem.get(bytes), bytes}); };
    auto temp = [&](std::size_t bytes) { mem.put(mem.get(bytes), bytes); };
    for (int l = 0; l < params.layers; ++l) {  // forward: activations saved for backward
      keep(tokens * h * half);                 // layer norm output
      keep(tokens * 3 * h * half);             // qkv
      keep(b * heads * s * s * half);          // attention probabilities
      temp(b * heads * s * s * single);        // softmax in fp32
      keep(tokens * h * half);                 // attention output
      keep(tokens * 4 * h * half);             // ffn up
      keep(tokens * 4 * h * half);             // activation
      temp(tokens * h * half);                 // dropout mask
      keep(tokens * h * half);                 // residual output
    }
    if (step == 0) {  // gradients and Adam states appear on the first step, as in PyTorch
      for (std::size_t i = 0; i < weights * 3; ++i) {
        const std::size_t bytes = persistent[i % weights].bytes;
        persistent.push_back({mem.get(bytes), bytes});
      }
    }
    while (!saved.empty()) {  // backward: reverse order, with gradient temporaries
      const tensor t = saved.back();
      saved.pop_back();
      void* grad = mem.get(t.bytes);
      mem.put(t.ptr, t.bytes);
      mem.put(grad, t.bytes);
    }
    for (std::size_t i = 0; i < weights; ++i) temp(persistent[i].bytes);  // optimizer step temporaries
  }
  for (auto it = persistent.rbegin(); it != persistent.rend(); ++it) mem.put(it->ptr, it->bytes);
  return mem.counts;
}

}  // namespace streampool::bench
