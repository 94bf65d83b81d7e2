/* streampool/export.h — STREAMPOOL_API marks what libstreampool.so exports. The library is built with
 * hidden visibility, so only declarations carrying this macro (the public C++ API in
 * include/streampool and the C API) are visible to its users; internal namespaces stay inside. */
#ifndef STREAMPOOL_EXPORT_H
#define STREAMPOOL_EXPORT_H

#if defined(__cplusplus) && (defined(__GNUC__) || defined(__clang__))
/* The standard attribute form, so it may follow [[nodiscard]] and sit between `class` and the name. */
#define STREAMPOOL_API [[gnu::visibility("default")]]
/* For a nested implementation type of an exported class: its members stay inside the library. */
#define STREAMPOOL_INTERNAL [[gnu::visibility("hidden")]]
#elif defined(__GNUC__) || defined(__clang__)
#define STREAMPOOL_API __attribute__((visibility("default")))
#else
#define STREAMPOOL_API
#endif
#ifndef STREAMPOOL_INTERNAL
#define STREAMPOOL_INTERNAL
#endif

#endif /* STREAMPOOL_EXPORT_H */
