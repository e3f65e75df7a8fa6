# Runs cargo for bindings/rust/CMakeLists.txt (cmake -P, inside `cmake -E env` with cargo's
# environment): builds the crate and the examples named in EXAMPLES (comma-separated), release
# profile, offline; with TESTS=ON also the test executables, which it links under stable names
# (errors, train, ...; `cohort` for the crate's unit tests) into TEST_DIR, so that ctest runs
# them directly instead of invoking cargo.
#
#   cmake -DCARGO=... -DMANIFEST=... -DEXAMPLES=a,b -DTESTS=ON -DTEST_DIR=... -P cargo_build.cmake
set(common --release --offline -j 2 --manifest-path ${MANIFEST})

set(build_args build ${common} --lib)
string(REPLACE "," ";" examples "${EXAMPLES}")
foreach(example IN LISTS examples)
  list(APPEND build_args --example ${example})
endforeach()
execute_process(COMMAND ${CARGO} ${build_args} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cohort: cargo build of the Rust binding failed (${rc})")
endif()

if(NOT TESTS)
  return()
endif()
# Diagnostics go to stderr as text; stdout carries one JSON message per artifact.
execute_process(COMMAND ${CARGO} test ${common} --no-run --message-format=json-render-diagnostics
                OUTPUT_VARIABLE messages RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cohort: cargo test --no-run of the Rust binding failed (${rc})")
endif()
string(REGEX MATCHALL "\"executable\":\"[^\"]+\"" executables "${messages}")
if(NOT executables)
  message(FATAL_ERROR "cohort: cargo reported no test executables for the Rust binding")
endif()
file(MAKE_DIRECTORY ${TEST_DIR})
foreach(entry IN LISTS executables)
  string(REGEX REPLACE "^\"executable\":\"(.*)\"$" "\\1" path "${entry}")
  if(NOT path MATCHES "/deps/[^/]+$")
    continue() # an example built along with the tests, not a test
  endif()
  get_filename_component(file ${path} NAME)
  string(REGEX REPLACE "-[0-9a-f]+$" "" name "${file}") # errors-1a2b3c... -> errors
  file(REMOVE ${TEST_DIR}/${name})
  file(CREATE_LINK ${path} ${TEST_DIR}/${name} SYMBOLIC)
endforeach()
