# Multi-process collective tests (included from tests/multirank/CMakeLists.txt when present).
add_executable(coll_rank ${CMAKE_CURRENT_LIST_DIR}/coll_rank.cpp)
target_compile_options(coll_rank PRIVATE ${COHORT_WARNINGS})
target_include_directories(coll_rank PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
target_link_libraries(coll_rank PRIVATE cohort_transport_coll cohort_transport_bootstrap)

cohort_test(coll_multirank_test LABEL multirank TIMEOUT 180
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/coll_multirank_test.cpp LIBS)
add_dependencies(coll_multirank_test coll_rank)
target_compile_definitions(coll_multirank_test PRIVATE COLL_RANK_BIN="$<TARGET_FILE:coll_rank>")
