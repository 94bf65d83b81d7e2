// vmm_cost_probe.cpp — measures what a page move of expandable segments costs on the real device
// (Note [Moving free pages]): cuMemUnmap, cuMemMap and cuMemSetAccess of 2 MiB pages, one call per
// page and one call over a run of pages, on an idle device and while other work runs on another
// stream (does the call wait for the device?). Prints one line per measurement: the median time
// per call in microseconds over --repeat rounds.
// Build: g++ -O2 -std=c++17 vmm_cost_probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -lcudart
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorString(r, &s);
    std::fprintf(stderr, "%s failed: %s\n", what, s != nullptr ? s : "?");
    std::exit(1);
  }
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int pages = argc > 1 ? std::atoi(argv[1]) : 64;
  const int repeat = argc > 2 ? std::atoi(argv[2]) : 9;
  cudaFree(nullptr);  // context
  CUdevice dev = 0;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t page = 0;
  check(cuMemGetAllocationGranularity(&page, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
  std::printf("granularity %zu bytes, %d pages, %d rounds\n", page, pages, repeat);
  std::vector<CUmemGenericAllocationHandle> handles(pages);
  for (auto& h : handles) check(cuMemCreate(&h, page, &prop, 0), "cuMemCreate");
  CUdeviceptr va = 0;
  check(cuMemAddressReserve(&va, page * pages, page, 0, 0), "cuMemAddressReserve");
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

  // Background work: a large memset on another stream, long enough to cover one round.
  void* busy_buf = nullptr;
  const size_t busy_bytes = size_t{8} << 30;
  cudaMalloc(&busy_buf, busy_bytes);
  cudaStream_t busy;
  cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking);
  cudaEvent_t done;
  cudaEventCreate(&done);

  for (const bool loaded : {false, true}) {
    std::vector<double> map_each, access_run, unmap_each, map_run_access, unmap_run, sync_wait;
    bool run_unmap_ok = true;
    for (int r = 0; r < repeat; ++r) {
      if (loaded) {
        for (int i = 0; i < 4; ++i) cudaMemsetAsync(busy_buf, i, busy_bytes, busy);
        cudaEventRecord(done, busy);
      }
      double t = now_us();
      for (int i = 0; i < pages; ++i) check(cuMemMap(va + i * page, page, 0, handles[i], 0), "cuMemMap");
      map_each.push_back((now_us() - t) / pages);
      t = now_us();
      check(cuMemSetAccess(va, page * pages, &access, 1), "cuMemSetAccess");
      access_run.push_back(now_us() - t);
      t = now_us();
      for (int i = 0; i < pages; ++i) check(cuMemUnmap(va + i * page, page), "cuMemUnmap");
      unmap_each.push_back((now_us() - t) / pages);
      // Map again, then one cuMemUnmap over the whole run of separately mapped pages.
      t = now_us();
      for (int i = 0; i < pages; ++i) check(cuMemMap(va + i * page, page, 0, handles[i], 0), "cuMemMap");
      check(cuMemSetAccess(va, page * pages, &access, 1), "cuMemSetAccess");
      map_run_access.push_back(now_us() - t);
      t = now_us();
      const CUresult whole = cuMemUnmap(va, page * pages);
      unmap_run.push_back(now_us() - t);
      if (whole != CUDA_SUCCESS) {
        run_unmap_ok = false;
        for (int i = 0; i < pages; ++i) check(cuMemUnmap(va + i * page, page), "cuMemUnmap");
      }
      if (loaded) {
        t = now_us();
        cudaEventSynchronize(done);
        sync_wait.push_back(now_us() - t);
      }
    }
    const char* mode = loaded ? "busy device" : "idle device";
    std::printf("%s: cuMemMap per page %.2f us | cuMemSetAccess of %d pages %.2f us | cuMemUnmap per page %.2f us\n",
                mode, median(map_each), pages, median(access_run), median(unmap_each));
    std::printf("%s: map %d pages + one set access %.2f us | one cuMemUnmap over %d pages %.2f us (%s)\n", mode,
                pages, median(map_run_access), pages, median(unmap_run),
                run_unmap_ok ? "accepted" : "refused; unmapped page by page");
    if (loaded) {
      std::printf("%s: the background work still ran %.0f us after the round (so the calls did not wait for it)\n",
                  mode, median(sync_wait));
    }
  }
  check(cuMemAddressFree(va, page * pages), "cuMemAddressFree");
  for (auto h : handles) check(cuMemRelease(h), "cuMemRelease");
  return 0;
}
