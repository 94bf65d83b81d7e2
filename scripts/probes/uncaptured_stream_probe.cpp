// uncaptured_stream_probe.cpp — measures which stream-ordered calls on a stream that is NOT capturing
// are refused (and invalidate the capture) while the thread has a capture open, per capture mode.
// Build and run on a GPU machine: g++ -O1 uncaptured_stream_probe.cpp -I/usr/local/cuda/include \
//   -L/usr/local/cuda/lib64 -lcudart && ./a.out   (results: docs/graph-capture.md)
#include <cuda_runtime.h>
#include <cstdio>
#define P(label, expr) do { cudaError_t e_ = (expr); std::printf("%-58s -> %s\n", label, cudaGetErrorName(e_)); cudaGetLastError(); } while (0)
static const char* st(cudaStream_t s) {
  cudaStreamCaptureStatus status; unsigned long long id;
  cudaError_t e = cudaStreamGetCaptureInfo(s, &status, &id);
  if (e != cudaSuccess) return cudaGetErrorName(e);
  return status == cudaStreamCaptureStatusActive ? "active" : status == cudaStreamCaptureStatusInvalidated ? "INVALIDATED" : "none";
}
struct relaxed { cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; relaxed() { cudaThreadExchangeStreamCaptureMode(&m); } ~relaxed() { cudaThreadExchangeStreamCaptureMode(&m); } };
int main() {
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
  return 0;
}
