# expect_status.cmake — CTest helper: runs ${BENCH} ${ARGS} (a |-joined list) and fails unless it exits
# with status ${EXPECT}; used for the bad-input smoke tests (exit status 2 plus a message on stderr).
# Optional: INPUT (a file given as stdin), MATCH (a regex stderr must match), OUT_MATCH (one stdout
# must match) and ONE_LINE (then
# exactly one line of stderr may start with "streampool-bench": bad input is answered once, not
# once per row; Note [Bad input stops the run once] in isolated_run.cpp).
string(REPLACE "|" ";" args "${ARGS}")
if(DEFINED INPUT)
  execute_process(COMMAND ${BENCH} ${args} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out INPUT_FILE ${INPUT})
else()
  execute_process(COMMAND ${BENCH} ${args} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
endif()
if(NOT rc STREQUAL "${EXPECT}")
  message(FATAL_ERROR "expected exit status ${EXPECT}, got '${rc}'; stderr:\n${err}")
endif()
if(NOT EXPECT EQUAL 0 AND err STREQUAL "")
  message(FATAL_ERROR "exit status ${EXPECT} but nothing on stderr")
endif()
if(DEFINED OUT_MATCH AND NOT out MATCHES "${OUT_MATCH}")
  message(FATAL_ERROR "stdout does not match '${OUT_MATCH}':\n${out}\nstderr:\n${err}")
endif()
if(DEFINED MATCH AND NOT err MATCHES "${MATCH}")
  message(FATAL_ERROR "stderr does not match '${MATCH}':\n${err}")
endif()
if(ONE_LINE)
  string(REGEX MATCHALL "(^|\n)streampool-bench" lines "${err}")
  list(LENGTH lines count)
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "expected one message line, got ${count}:\n${err}")
  endif()
endif()
message(STATUS "exit status ${rc} as expected; stderr: ${err}")
