# expect_status.cmake — CTest helper: runs ${BENCH} ${ARGS} (a |-joined list) and fails unless it exits
# with status ${EXPECT}; used for the bad-input smoke tests (exit status 2 plus a message on stderr).
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND ${BENCH} ${args} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc STREQUAL "${EXPECT}")
  message(FATAL_ERROR "expected exit status ${EXPECT}, got '${rc}'; stderr:\n${err}")
endif()
if(err STREQUAL "")
  message(FATAL_ERROR "exit status ${EXPECT} but nothing on stderr")
endif()
message(STATUS "exit status ${rc} as expected; stderr: ${err}")
