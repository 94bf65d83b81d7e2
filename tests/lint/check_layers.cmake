# check_layers.cmake — the layer rule of src/ (ctest `lint.layers`, docs/architecture.md "Layers"):
# every file lives in a layer's folder, and a file includes (#include "...") only its own folder,
# the public headers (streampool/...) and the folders of lower levels. Folders of one level are
# peers and do not include each other; driver/cuda and driver/sim are private to themselves (the
# rest of the library sees a driver only through streampool/driver.hpp and sim_driver.hpp).
# An include that names no file under src/ (<...> headers, kernels/) is not a layer include. Run as
#   cmake -DSRC_DIR=<the src directory> -P check_layers.cmake
cmake_minimum_required(VERSION 3.25)  # IN_LIST
if(NOT SRC_DIR)
  message(FATAL_ERROR "check_layers.cmake: pass -DSRC_DIR=<the src directory>")
endif()

# The rule, bottom-up: one entry per level, peers separated by commas.
set(levels
  config                  # the key table, parsers, env lookup
  driver                  # the driver interface's own definitions, shared by both drivers
  driver/cuda,driver/sim  # the real driver; the simulated device
  core                    # the allocator facade and what every allocator shares
  capture                 # the capture router both backends keep their captures in
  native,async,host       # the caching backend, the cudaMallocAsync backend, the pinned host allocator
  graph,replay,check      # over the facade: RAII capture, trace replay, checking mode
  factory                 # make_allocator(): the one place that knows every backend
  c_api)                  # the C entry points
set(private_folders driver/cuda driver/sim)

set(level 0)
set(known_folders "")
foreach(entry IN LISTS levels)
  math(EXPR level "${level} + 1")
  string(REPLACE "," ";" peers "${entry}")
  foreach(folder IN LISTS peers)
    set(level_of_${folder} ${level})
    list(APPEND known_folders ${folder})
  endforeach()
endforeach()

file(GLOB_RECURSE sources ${SRC_DIR}/*.cpp ${SRC_DIR}/*.hpp ${SRC_DIR}/*.h ${SRC_DIR}/*.cu)
set(bad "")
set(checked 0)
foreach(source IN LISTS sources)
  file(RELATIVE_PATH rel ${SRC_DIR} ${source})
  get_filename_component(folder ${rel} DIRECTORY)
  if(folder STREQUAL "")
    list(APPEND bad "src/${rel}: a file at the root of src/: every file lives in its layer's folder")
    continue()
  endif()
  if(NOT folder IN_LIST known_folders)
    list(APPEND bad "src/${rel}: folder src/${folder} is in no level of the rule: add it to tests/lint/check_layers.cmake and docs/architecture.md")
    continue()
  endif()
  file(STRINGS ${source} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\"")
      continue()
    endif()
    set(included ${CMAKE_MATCH_1})
    if(included MATCHES "^streampool/")
      continue()  # the public headers: every layer may use them
    endif()
    if(EXISTS ${SRC_DIR}/${included})
      get_filename_component(target ${included} DIRECTORY)
    elseif(EXISTS ${SRC_DIR}/${folder}/${included})
      set(target ${folder})
    else()
      continue()  # not a file of src/ (a kernel's header, a system header written with quotes)
    endif()
    math(EXPR checked "${checked} + 1")
    if(target STREQUAL folder)
      continue()
    endif()
    if(target STREQUAL "" OR NOT target IN_LIST known_folders)
      continue()  # reported above as a file outside the rule's folders
    endif()
    set(where "src/${rel}: #include \"${included}\"")
    set(own ${level_of_${folder}})
    set(other ${level_of_${target}})
    if(target IN_LIST private_folders)
      list(APPEND bad "${where}: src/${target} is private to itself: ${folder} sees a driver through streampool/driver.hpp")
    elseif(other EQUAL own)
      list(APPEND bad "${where}: ${folder} and ${target} are peers (level ${own}), and peers do not include each other")
    elseif(other GREATER own)
      list(APPEND bad "${where}: ${folder} (level ${own}) includes ${target} (level ${other}), and a layer includes only lower levels")
    endif()
  endforeach()
endforeach()

if(bad)
  list(LENGTH bad count)
  string(REPLACE ";" "\n  " shown "${bad}")
  message(FATAL_ERROR "${count} breaks of the layer rule (docs/architecture.md, Layers; the rule: "
                      "tests/lint/check_layers.cmake):\n  ${shown}\n"
                      "Move the code to the layer it belongs to, or what both need below them both.")
endif()
if(checked EQUAL 0)
  message(FATAL_ERROR "no #include of a src/ file found under ${SRC_DIR}: the check would prove nothing")
endif()
message(STATUS "${checked} includes of src/ files follow the layer rule")
