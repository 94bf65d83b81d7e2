# check_exports.cmake — checks what libstreampool.so exports (ctest `abi.exported_symbols`):
# every C function declared in include/streampool/*.h is exported, and no symbol of an internal
# namespace (streampool::native, ::async, ::sim, ...) is. The internal namespaces are the list
# below plus every namespace opened under SRC_DIR, so a layer that gets a namespace of its own is
# checked without editing this file. Run as
#   cmake -DLIB=libstreampool.so -DINCLUDE_DIR=include/streampool -DSRC_DIR=src -P check_exports.cmake
if(NOT LIB OR NOT INCLUDE_DIR OR NOT SRC_DIR)
  message(FATAL_ERROR "check_exports.cmake: pass -DLIB=<libstreampool.so> -DINCLUDE_DIR=<include/streampool> "
                      "-DSRC_DIR=<src>")
endif()
find_program(NM nm REQUIRED)
execute_process(COMMAND ${NM} -D --defined-only -C ${LIB} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIB}")
endif()
string(REPLACE "\n" ";" lines "${symbols}")

# 1. No internal namespace leaks. One per layer (docs/architecture.md "Namespaces"); `detail` is
# core's until it becomes `core`.
set(internal async c_api_impl capture check_impl config_impl core detail driver_impl host native replay_impl sim)
file(GLOB_RECURSE sources ${SRC_DIR}/*.cpp ${SRC_DIR}/*.hpp)
foreach(source IN LISTS sources)
  # `namespace streampool::x {` and, inside `namespace streampool {`, `namespace x {`.
  file(STRINGS ${source} opened REGEX "^namespace [a-z_:]+ {")
  foreach(line IN LISTS opened)
    string(REGEX REPLACE "^namespace (streampool::)?([a-z_]+).*" "\\2" ns "${line}")
    if(NOT ns STREQUAL "streampool")
      list(APPEND internal ${ns})
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES internal)
set(leaks "")
set(exported 0)
foreach(line IN LISTS lines)
  if(line MATCHES "streampool")
    math(EXPR exported "${exported} + 1")
  endif()
  foreach(ns IN LISTS internal)
    if(line MATCHES "streampool::${ns}::")
      list(APPEND leaks "${line}")
      break()
    endif()
  endforeach()
endforeach()
list(LENGTH leaks leak_count)
if(leak_count GREATER 0)
  list(SUBLIST leaks 0 20 shown)
  string(REPLACE ";" "\n  " shown "${shown}")
  message(FATAL_ERROR "libstreampool.so exports ${leak_count} symbols of internal namespaces, e.g.\n  ${shown}\n"
                      "Internal code must not carry STREAMPOOL_API, and layers build with hidden visibility.")
endif()

# 2. Every C entry point declared in the public C headers is exported.
file(GLOB c_headers ${INCLUDE_DIR}/*.h)
set(missing "")
set(declared 0)
foreach(header IN LISTS c_headers)
  # Every function declaration at the start of a line, marked or not: an unmarked one is hidden.
  file(STRINGS ${header} decls REGEX "^[A-Za-z_][A-Za-z_ *]*[ *]streampool_[a-z0-9_]+\\(")
  foreach(decl IN LISTS decls)
    if(decl MATCHES "^typedef")
      continue()
    endif()
    string(REGEX MATCH "streampool_[a-z0-9_]+\\(" name "${decl}")
    string(REPLACE "(" "" name "${name}")
    math(EXPR declared "${declared} + 1")
    if(NOT symbols MATCHES " T ${name}\n")
      list(APPEND missing ${name})
    endif()
  endforeach()
endforeach()
if(missing)
  message(FATAL_ERROR "C API functions declared but not exported by libstreampool.so: ${missing} "
                      "(declare them with STREAMPOOL_API, include/streampool/export.h)")
endif()
if(declared EQUAL 0)
  message(FATAL_ERROR "no C declarations found under ${INCLUDE_DIR}: the check would prove nothing")
endif()
list(JOIN internal ", " internal_names)
message(STATUS "libstreampool.so: ${exported} streampool symbols exported, ${declared} C entry points, "
               "nothing of the internal namespaces (${internal_names})")
