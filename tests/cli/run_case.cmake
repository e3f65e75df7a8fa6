# One bad-input case of the `cohort` CLI: runs EXE with ARGS ('|'-separated) and checks the exit
# code (EXPECT_RC), that stderr is exactly one line starting "error: " and that it contains EXPECT.
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND ${EXE} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 120)
if(NOT rc STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "exit code ${rc}, expected ${EXPECT_RC}\nstderr: ${err}\nstdout: ${out}")
endif()
string(REGEX MATCHALL "\n" newlines "${err}")
list(LENGTH newlines lines)
if(NOT lines EQUAL 1 OR NOT err MATCHES "^error: ")
  message(FATAL_ERROR "stderr is not one 'error: ...' line:\n${err}")
endif()
string(FIND "${err}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "stderr does not contain '${EXPECT}':\n${err}")
endif()
