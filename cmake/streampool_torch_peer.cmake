# The PyTorch peer plugin (perf/torch_peer/libstreampool_torch_peer.so), built whenever `import
# torch` works in python3, so `streampool-bench compare` includes PyTorch's allocators with no
# manual step. It is its own CMake project, built as an ExternalProject: libtorch's CMake config
# (flags, CUDA settings, C++ ABI) stays out of the rest of the build. The library lands in
# <build>/perf/, beside streampool-bench, where the bench looks for it (docs/harness.md "PyTorch
# peers"). STREAMPOOL_WITH_TORCH: AUTO (default: when torch imports), ON (required), OFF.
# Independent of STREAMPOOL_BUILD_PERF: the GPU machine builds the plugin without the bench.
set(STREAMPOOL_WITH_TORCH AUTO CACHE STRING "Build the PyTorch peer plugin perf/torch_peer: AUTO (when python3 can import torch), ON or OFF")
set_property(CACHE STREAMPOOL_WITH_TORCH PROPERTY STRINGS AUTO ON OFF)

set(STREAMPOOL_TORCH_PEER_PATH "" CACHE INTERNAL "the PyTorch peer plugin this build makes, if any")
if(NOT STREAMPOOL_WITH_TORCH STREQUAL "OFF")
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(streampool_torch_prefix "")
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "import torch; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE streampool_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE streampool_torch_rc ERROR_QUIET)
    if(NOT streampool_torch_rc EQUAL 0)
      set(streampool_torch_prefix "")
    endif()
  endif()
  if(streampool_torch_prefix STREQUAL "")
    if(STREAMPOOL_WITH_TORCH STREQUAL "ON")
      message(FATAL_ERROR "STREAMPOOL_WITH_TORCH=ON but `python3 -c 'import torch'` fails: install PyTorch or use AUTO/OFF")
    endif()
    message(STATUS "PyTorch peer plugin: not built (python3 cannot import torch)")
  else()
    include(ExternalProject)
    set(streampool_torch_peer_dir ${CMAKE_BINARY_DIR}/perf)
    ExternalProject_Add(streampool_torch_peer_build
      SOURCE_DIR ${PROJECT_SOURCE_DIR}/perf/torch_peer
      BINARY_DIR ${CMAKE_BINARY_DIR}/torch_peer_build
      CMAKE_ARGS -DCMAKE_PREFIX_PATH=${streampool_torch_prefix}
                 -DCMAKE_BUILD_TYPE=Release
                 -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
                 -DCMAKE_LIBRARY_OUTPUT_DIRECTORY=${streampool_torch_peer_dir}
                 -DCMAKE_POLICY_VERSION_MINIMUM=3.5  # Torch's CMake files predate CMake 4's policy floor
      BUILD_ALWAYS ON
      INSTALL_COMMAND "")
    set(STREAMPOOL_TORCH_PEER_PATH ${streampool_torch_peer_dir}/libstreampool_torch_peer.so CACHE INTERNAL "")
    message(STATUS "PyTorch peer plugin: built from ${streampool_torch_prefix} into ${STREAMPOOL_TORCH_PEER_PATH}")
  endif()
endif()
