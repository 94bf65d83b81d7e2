/* main.c — a C consumer of libstreampool.so through streampool/c_api.h. On a machine with a GPU it
 * allocates and frees 1 MiB and prints the statistics; without one it prints the clear error the
 * C API reports. Exits non-zero only when the API misbehaves. */
#include <streampool/c_api.h>

#include <stdio.h>

int main(void) {
  const char* backend = streampool_backend_name();
  if (backend == NULL) {
    /* Without a usable GPU the allocator cannot be made: the C API says so with the CUDA status
     * (include/streampool/c_api.h). A failure without a status or a message is a bug. */
    if (streampool_last_status() == STREAMPOOL_OK || streampool_last_error()[0] == '\0') {
      fprintf(stderr, "consumer_c: streampool_backend_name failed without a status or message\n");
      return 1;
    }
    printf("consumer_c: no allocator here (status %d): %s\n", streampool_last_status(), streampool_last_error());
    printf("consumer_c: OK\n");
    return 0;
  }
  void* p = streampool_alloc(1 << 20, 0, NULL);
  if (p == NULL) {
    if (streampool_last_status() == STREAMPOOL_OK || streampool_last_error()[0] == '\0') {
      fprintf(stderr, "consumer_c: allocation failed without a status or message\n");
      return 1;
    }
    printf("consumer_c: %s backend, no allocation here (status %d): %s\n", backend, streampool_last_status(),
           streampool_last_error());
    printf("consumer_c: OK\n");
    return 0;
  }
  streampool_free(p, 1 << 20, 0, NULL);
  if (streampool_last_status() != STREAMPOOL_OK) {
    fprintf(stderr, "consumer_c: free failed: %s\n", streampool_last_error());
    return 1;
  }
  const char* stats = streampool_stats_json(0);
  printf("consumer_c: %s backend, stats %.120s...\n", backend, stats ? stats : "(none)");
  printf("consumer_c: OK\n");
  return streampool_shutdown() == STREAMPOOL_OK ? 0 : 1;
}
