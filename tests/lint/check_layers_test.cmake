# check_layers_test.cmake — proves that check_layers.cmake can fail (ctest `lint.layers_catches`):
# it writes two small src/ trees under WORK, one that follows the layer rule and one that breaks
# it in each way the rule names (an upward include, peers, a private driver folder, a file at the
# root of src/, a folder the rule does not know), runs the check on both and fails unless the
# first passes and the second fails naming every file, include and rule. Run as
#   cmake -DCHECK=<check_layers.cmake> -DWORK=<scratch directory> -P check_layers_test.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT CHECK OR NOT WORK)
  message(FATAL_ERROR "check_layers_test.cmake: pass -DCHECK=<check_layers.cmake> -DWORK=<scratch directory>")
endif()
file(REMOVE_RECURSE ${WORK})

function(write_tree root)  # pairs: path text
  while(ARGN)
    list(POP_FRONT ARGN path text)
    file(WRITE ${root}/src/${path} "${text}\n")
  endwhile()
endfunction()

function(run_check root out_rc out_text)
  execute_process(COMMAND ${CMAKE_COMMAND} -DSRC_DIR=${root}/src -P ${CHECK}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  # The message wraps long lines; join them so that a whole finding can be matched.
  string(REGEX REPLACE "[ \t]*\n[ \t]*" " " text "${out}${err}")
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_text} "${text}" PARENT_SCOPE)
endfunction()

# A tree that follows the rule: own folder (by path and by bare name), lower levels, public headers.
write_tree(${WORK}/good
  config/keys.hpp "#pragma once"
  core/format.hpp "#pragma once\n#include \"config/keys.hpp\""
  core/format.cpp "#include \"format.hpp\"\n#include \"core/format.hpp\"\n#include \"streampool/stats.hpp\""
  native/arena.hpp "#pragma once\n#include \"core/format.hpp\"\n#include <vector>"
  driver/sim/sim_state.hpp "#pragma once"
  driver/sim/sim_driver.cpp "#include \"driver/sim/sim_state.hpp\""
  c_api/c_api.cpp "#include \"core/format.hpp\"\n#include \"native/arena.hpp\"")
run_check(${WORK}/good rc text)
if(NOT rc EQUAL 0 OR NOT text MATCHES "7 includes of src/ files follow the layer rule")
  message(FATAL_ERROR "check_layers.cmake refused a tree that follows the rule (rc ${rc}):\n${text}")
endif()

# A tree that breaks it once in each way.
write_tree(${WORK}/bad
  core/format.hpp "#pragma once\n#include \"native/arena.hpp\""
  native/arena.hpp "#pragma once"
  async/pool.cpp "#include \"native/arena.hpp\""
  check/canary.cpp "#include \"driver/sim/sim_state.hpp\""
  driver/sim/sim_state.hpp "#pragma once"
  loose.cpp "#include \"core/format.hpp\""
  plugins/plugin.cpp "#include \"core/format.hpp\"")
run_check(${WORK}/bad rc text)
if(rc EQUAL 0)
  message(FATAL_ERROR "check_layers.cmake passed a tree that breaks the rule:\n${text}")
endif()
set(expected
  "src/core/format.hpp: #include \"native/arena.hpp\": core \\(level 4\\) includes native \\(level 6\\), and a layer includes only lower levels"
  "src/async/pool.cpp: #include \"native/arena.hpp\": async and native are peers \\(level 6\\)"
  "src/check/canary.cpp: #include \"driver/sim/sim_state.hpp\": src/driver/sim is private to itself"
  "src/loose.cpp: a file at the root of src/"
  "src/plugins/plugin.cpp: folder src/plugins is in no level of the rule"
  "5 breaks of the layer rule")
foreach(finding IN LISTS expected)
  if(NOT text MATCHES "${finding}")
    message(FATAL_ERROR "check_layers.cmake did not report `${finding}`; it said:\n${text}")
  endif()
endforeach()
message(STATUS "check_layers.cmake passes a tree that follows the rule and reports every finding in one that breaks it")
