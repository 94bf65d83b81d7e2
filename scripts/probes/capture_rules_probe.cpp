// capture_rules_probe.cpp — measures, on a real GPU, which CUDA calls are legal while a stream
// capture is open, per capture mode: (1) non-stream calls (pool attributes, cudaMemGetInfo,
// relaxed cudaMalloc) and whether instantiating one graph while a second capture is open breaks
// the second; (2) stream-ordered calls on a stream that is NOT capturing. The results are the
// basis of Note [Relaxed queries] (src/driver/cuda/cuda_scopes.hpp) and Note [Relaxed uncaptured
// calls] (src/driver/sim/sim_capture.cpp); docs/graph-capture.md lists them.
// Build and run on a GPU machine:
//   g++ -O1 capture_rules_probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart && ./a.out
#include <cuda_runtime.h>
#include <cstdio>
#define P(label, expr) do { cudaError_t e_ = (expr); std::printf("%-60s -> %s\n", label, cudaGetErrorName(e_)); } while (0)
static const char* st(cudaStream_t s) {
  cudaStreamCaptureStatus status; unsigned long long id;
  cudaError_t e = cudaStreamGetCaptureInfo(s, &status, &id);
  if (e != cudaSuccess) return cudaGetErrorName(e);
  return status == cudaStreamCaptureStatusActive ? "active" : status == cudaStreamCaptureStatusInvalidated ? "INVALIDATED" : "none";
}
struct relaxed { cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; relaxed() { cudaThreadExchangeStreamCaptureMode(&m); } ~relaxed() { cudaThreadExchangeStreamCaptureMode(&m); } };

static void non_stream_calls() {
  cudaSetDevice(0); cudaFree(0);
  cudaMemPool_t def; cudaDeviceGetDefaultMemPool(&def, 0);
  cudaMemPool_t own; cudaMemPoolProps props = {}; props.allocType = cudaMemAllocationTypePinned; props.location.type = cudaMemLocationTypeDevice; props.location.id = 0;
  P("create own pool", cudaMemPoolCreate(&own, &props));
  for (int mode = 0; mode < 3; ++mode) {
    cudaStreamCaptureMode cm = mode == 0 ? cudaStreamCaptureModeGlobal : mode == 1 ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeRelaxed;
    std::printf("=== capture mode %d (0 global, 1 thread-local, 2 relaxed)\n", mode);
    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    void* p = nullptr; unsigned long long v = 0;
    // 1. pool attr read in relaxed scope during capture
    P("begin", cudaStreamBeginCapture(s, cm));
    { relaxed r; P("relaxed getattr reserved(default pool)", cudaMemPoolGetAttribute(def, cudaMemPoolAttrReservedMemCurrent, &v)); }
    std::printf("  status after: %s\n", st(s));
    P("mallocAsync default pool", cudaMallocAsync(&p, 4096, s));
    P("freeAsync", cudaFreeAsync(p, s));
    P("mallocFromPoolAsync own pool", cudaMallocFromPoolAsync(&p, 4096, own, s));
    std::printf("  status after: %s\n", st(s));
    if (p) P("freeAsync", cudaFreeAsync(p, s));
    { relaxed r; size_t f, t; P("relaxed memGetInfo", cudaMemGetInfo(&f, &t)); }
    std::printf("  status after: %s\n", st(s));
    { relaxed r; P("relaxed cudaMalloc", cudaMalloc(&p, 1 << 20)); }
    std::printf("  status after: %s\n", st(s));
    cudaGraph_t g = nullptr; P("end", cudaStreamEndCapture(s, &g));
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    // 2. two captures, instantiate b while a captures
    cudaStream_t a, b; cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    P("begin a", cudaStreamBeginCapture(a, cm));
    P("begin b", cudaStreamBeginCapture(b, cm));
    P("malloc async a", cudaMallocAsync(&p, 512, a)); P("free a", cudaFreeAsync(p, a));
    P("malloc async b", cudaMallocAsync(&p, 512, b)); P("free b", cudaFreeAsync(p, b));
    cudaGraph_t gb = nullptr; P("end b", cudaStreamEndCapture(b, &gb));
    cudaGraphExec_t eb = nullptr;
    P("instantiate b (a capturing)", cudaGraphInstantiate(&eb, gb, 0));
    std::printf("  a status: %s\n", st(a));
    if (!eb) { relaxed r; P("relaxed instantiate b", cudaGraphInstantiate(&eb, gb, 0)); std::printf("  a status: %s\n", st(a)); }
    cudaGraph_t ga = nullptr; P("end a", cudaStreamEndCapture(a, &ga));
    cudaGetLastError();
    if (eb) { P("launch b", cudaGraphLaunch(eb, b)); P("sync b", cudaStreamSynchronize(b)); }
    cudaGetLastError();
  }
  }

static void uncaptured_stream_calls() {
  cudaSetDevice(0); cudaFree(0);
  cudaMemPool_t def; cudaDeviceGetDefaultMemPool(&def, 0);
  for (int mode = 0; mode < 2; ++mode) {
    cudaStreamCaptureMode cm = mode == 0 ? cudaStreamCaptureModeGlobal : cudaStreamCaptureModeThreadLocal;
    for (int op = 0; op < 7; ++op) {
      cudaStream_t s, other; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
      void* pre = nullptr; cudaMallocAsync(&pre, 4096, other); cudaStreamSynchronize(other);
      cudaEvent_t ev; cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
      cudaStreamBeginCapture(s, cm);
      void* p = nullptr; char label[128];
      switch (op) {
        case 0: std::snprintf(label, sizeof label, "mode %d: mallocAsync on uncaptured stream", mode); P(label, cudaMallocAsync(&p, 4096, other)); break;
        case 1: std::snprintf(label, sizeof label, "mode %d: relaxed mallocAsync on uncaptured stream", mode); { relaxed r; P(label, cudaMallocAsync(&p, 4096, other)); } break;
        case 2: std::snprintf(label, sizeof label, "mode %d: freeAsync on uncaptured stream", mode); P(label, cudaFreeAsync(pre, other)); pre = nullptr; break;
        case 3: std::snprintf(label, sizeof label, "mode %d: relaxed freeAsync on uncaptured stream", mode); { relaxed r; P(label, cudaFreeAsync(pre, other)); } pre = nullptr; break;
        case 4: std::snprintf(label, sizeof label, "mode %d: eventRecord on uncaptured stream", mode); P(label, cudaEventRecord(ev, other)); break;
        case 5: std::snprintf(label, sizeof label, "mode %d: mallocAsync on uncaptured legacy stream", mode); P(label, cudaMallocAsync(&p, 4096, nullptr)); break;
        case 6: std::snprintf(label, sizeof label, "mode %d: relaxed eventQuery on uncaptured event", mode); { relaxed r; P(label, cudaEventQuery(ev)); } break;
      }
      std::printf("    capture after: %s\n", st(s));
      cudaGraph_t g = nullptr; cudaError_t e = cudaStreamEndCapture(s, &g); std::printf("    end: %s\n", cudaGetErrorName(e)); cudaGetLastError();
      if (g) cudaGraphDestroy(g);
      if (p) cudaFreeAsync(p, other);
      if (pre) cudaFreeAsync(pre, other);
      cudaDeviceSynchronize(); cudaGetLastError();
      cudaEventDestroy(ev); cudaStreamDestroy(s); cudaStreamDestroy(other);
    }
  }
  }

int main() {
  non_stream_calls();
  uncaptured_stream_calls();
  return 0;
}
