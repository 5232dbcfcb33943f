# tests/long_tests.cmake: read by CTest after the list of the test files'
# tests (heed_tests_TESTS, from doctest_discover_tests; tests/CMakeLists.txt
# adds this file to TEST_INCLUDE_FILES after that list's). The longest files
# get a COST, so that a fresh build tree, which has no timings yet, starts
# them early beside the short ones instead of last, alone.
foreach(long IN ITEMS experiments/test_fault_matrix.cpp experiments/test_bad_inputs.cpp experiments/test_bench.cpp)
  list(FIND heed_tests_TESTS "${long}" at)
  if(NOT at EQUAL -1)
    set_tests_properties("${long}" PROPERTIES COST 300)
  endif()
endforeach()
