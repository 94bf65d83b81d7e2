# Helpers shared by the CMake files: warnings, one object library per source layer, and
# streampool_add_test() which registers a GoogleTest binary with CTest labels.
find_package(Threads REQUIRED)

set(STREAMPOOL_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor)
set(STREAMPOOL_LAYERS "")

# Note [Precompiled test headers]
# About 200 test sources are compiled in each of the three builds of scripts/test (RelWithDebInfo,
# ASan+UBSan, TSan), and each used to parse <gtest/gtest.h> and the public headers again: ~1.3 s of
# the build machine's CPU per source before any of its own code, a few minutes of CI's 2 cores.
# So each test binary precompiles them once (target_precompile_headers; one header per target, as
# their compile definitions differ) and every C++ source of it is compiled with that header
# included first. A test source must therefore not depend on a macro defined before its includes;
# none does. -DSTREAMPOOL_TEST_PCH=OFF turns it off (e.g. for a compiler cache that cannot share
# precompiled headers).
option(STREAMPOOL_TEST_PCH "precompile GoogleTest and the public headers for the test binaries" ON)
set(STREAMPOOL_TEST_PCH_HEADERS
  "$<$<COMPILE_LANGUAGE:CXX>:<gtest/gtest.h>>"
  "$<$<COMPILE_LANGUAGE:CXX>:<streampool/streampool.hpp>>")

# streampool_add_layer(NAME [SUBDIRS dir...]): object library streampool_NAME_objects from
# src/NAME/*.cpp and src/NAME/<dir>/*.cpp for each SUBDIRS entry (the driver layer: its shared
# part, driver/cuda and driver/sim). Call it in the order of the layer rule (docs/architecture.md).
function(streampool_add_layer name)
  cmake_parse_arguments(arg "" "" "SUBDIRS" ${ARGN})
  set(globs ${PROJECT_SOURCE_DIR}/src/${name}/*.cpp)
  foreach(dir IN LISTS arg_SUBDIRS)
    list(APPEND globs ${PROJECT_SOURCE_DIR}/src/${name}/${dir}/*.cpp)
  endforeach()
  file(GLOB sources CONFIGURE_DEPENDS ${globs})
  if(NOT sources)
    return()
  endif()
  add_library(streampool_${name}_objects OBJECT ${sources})
  target_include_directories(streampool_${name}_objects PUBLIC
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_include_directories(streampool_${name}_objects SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_options(streampool_${name}_objects PRIVATE ${STREAMPOOL_WARNINGS})
  target_link_libraries(streampool_${name}_objects PUBLIC Threads::Threads)
  # Note [Hidden visibility]: only declarations marked STREAMPOOL_API (include/streampool/export.h)
  # leave libstreampool.so; everything else, the internal namespaces included, stays inside.
  set_target_properties(streampool_${name}_objects PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  set(STREAMPOOL_LAYERS ${STREAMPOOL_LAYERS} ${name} PARENT_SCOPE)
endfunction()

# streampool_add_test(NAME SOURCES a.cpp ... LAYERS config driver ... [LINK lib...] [LABELS sim|gpu ...]
#                     [SERIAL] [DEVICE_WIDE gtest-filter])
# Links only the named layers' objects (so a layer's tests build while another layer is being
# written) or, with LAYERS all, the full static library.
function(streampool_add_test name)
  cmake_parse_arguments(arg "SERIAL" "DEVICE_WIDE" "SOURCES;LAYERS;LINK;LABELS" ${ARGN})
  if(NOT arg_SOURCES)
    return()
  endif()
  add_executable(${name} ${arg_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
                                             ${PROJECT_SOURCE_DIR}/tests)
  target_compile_options(${name} PRIVATE ${STREAMPOOL_WARNINGS})
  if("all" IN_LIST arg_LAYERS)
    target_link_libraries(${name} PRIVATE streampool)
  else()
    foreach(layer IN LISTS arg_LAYERS)
      if(TARGET streampool_${layer}_objects)
        # Linking an object library links its objects and carries its usage requirements.
        target_link_libraries(${name} PRIVATE streampool_${layer}_objects)
      endif()
    endforeach()
    target_link_libraries(${name} PRIVATE CUDA::cudart Threads::Threads)
  endif()
  target_link_libraries(${name} PRIVATE ${arg_LINK} GTest::gtest GTest::gtest_main)
  # Note [Precompiled test headers]: every C++ test source starts with GoogleTest and the public
  # headers already parsed (CUDA sources are left alone: CMake has no precompiled headers for them).
  if(STREAMPOOL_TEST_PCH)
    target_precompile_headers(${name} PRIVATE ${STREAMPOOL_TEST_PCH_HEADERS})
  endif()
  # The test data in the repository (tests/data: traces, see tests/data/README.md).
  # The source tree (tests that check docs and sources against the code, e.g. the key table).
  target_compile_definitions(${name} PRIVATE STREAMPOOL_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
                                             STREAMPOOL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  # SERIAL: the binary's tests read device-wide figures (free memory) that other test processes
  # running at the same time would disturb on a real GPU.
  # (gtest_discover_tests itself marks a GTEST_SKIP as skipped in CTest: SKIP_REGULAR_EXPRESSION.
  # Passing that regex again broke the generated test files under CMake 4.)
  set(properties "")
  if(arg_SERIAL)
    list(APPEND properties RUN_SERIAL TRUE)
  endif()
  # Note [Test labels]: every test that needs a device carries the `gpu` label, the others `sim`.
  # A binary labelled only gpu needs one in every test; in the others, the instances on the real
  # driver need one: parameterised cases named .../cuda or ..._cuda (backend_fixture.hpp, the
  # driver contract, the multi-stream replay) and the real_device/ suites. The filter splits them.
  set(device_tests "*/cuda:*_cuda:real_device/*")
  set(gpu_only FALSE)
  if("gpu" IN_LIST arg_LABELS AND NOT "sim" IN_LIST arg_LABELS)
    set(gpu_only TRUE)
  endif()
  list(REMOVE_ITEM arg_LABELS sim gpu)
  set(gpu_labels gpu ${arg_LABELS})
  set(sim_labels sim ${arg_LABELS})
  if(gpu_only)
    gtest_discover_tests(${name} PROPERTIES LABELS "${gpu_labels}" ${properties} DISCOVERY_TIMEOUT 60)
  elseif(arg_DEVICE_WIDE)
    # DEVICE_WIDE: a gtest filter of device tests that read device-wide figures (free memory); they
    # run alone (RUN_SERIAL), since the other test processes on the GPU move those figures.
    gtest_discover_tests(${name} TEST_FILTER "${device_tests}-${arg_DEVICE_WIDE}"
                         PROPERTIES LABELS "${gpu_labels}" ${properties} DISCOVERY_TIMEOUT 60)
    gtest_discover_tests(${name} TEST_FILTER "${arg_DEVICE_WIDE}"
                         PROPERTIES LABELS "${gpu_labels}" RUN_SERIAL TRUE DISCOVERY_TIMEOUT 60)
    gtest_discover_tests(${name} TEST_FILTER "-${device_tests}"
                         PROPERTIES LABELS "${sim_labels}" ${properties} DISCOVERY_TIMEOUT 60)
  else()
    gtest_discover_tests(${name} TEST_FILTER "${device_tests}"
                         PROPERTIES LABELS "${gpu_labels}" ${properties} DISCOVERY_TIMEOUT 60)
    gtest_discover_tests(${name} TEST_FILTER "-${device_tests}"
                         PROPERTIES LABELS "${sim_labels}" ${properties} DISCOVERY_TIMEOUT 60)
  endif()
endfunction()
