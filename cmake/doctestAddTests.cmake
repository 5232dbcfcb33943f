# cmake/doctestAddTests.cmake: the script doctest_discover_tests() runs after
# each build of a test binary to turn its test cases into CTest tests: one
# CTest test per test file (e.g. "core/test_tensor.cpp"), which runs that
# file's test cases in one process (doctest's --source-file filter).
#
# Per file, not per test case: a test process of the sanitized build takes
# ~0.34 s to start (AddressSanitizer registering globals, loading the
# libraries), and one process per test case started ~420 of them, ~140 s of
# the sanitized suite's CPU time against ~20 s for one per file. The test
# cases of one file still run in their own process, apart from the other
# files', and a failure's output names the test case and line.
# (`./heed test -tc='pattern'` runs chosen test cases directly.)
#
# Replaces the script shipped with doctest 2.4.9 (tests/CMakeLists.txt points
# doctest.cmake here). Accepts the same -D variables as doctest's script;
# TEST_SPEC, ADD_LABELS and JUNIT_OUTPUT_DIR are not supported (heed uses
# none of them).

if(TEST_SPEC OR TEST_ADD_LABELS OR TEST_JUNIT_OUTPUT_DIR)
  message(FATAL_ERROR "heed's doctestAddTests.cmake supports neither TEST_SPEC, ADD_LABELS nor JUNIT_OUTPUT_DIR")
endif()
if(NOT EXISTS "${TEST_EXECUTABLE}")
  message(FATAL_ERROR "Specified test executable '${TEST_EXECUTABLE}' does not exist")
endif()

# The listing in doctest's XML reporter: one <TestCase .../> line per test
# case, with the file that defines it.
execute_process(
  COMMAND ${TEST_EXECUTOR} "${TEST_EXECUTABLE}" --list-test-cases --reporters=xml
  OUTPUT_VARIABLE output
  ERROR_VARIABLE errors
  RESULT_VARIABLE result
  WORKING_DIRECTORY "${TEST_WORKING_DIR}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "Error running test executable '${TEST_EXECUTABLE}' --list-test-cases:\n"
                      "  Result: ${result}\n  Output: ${output}\n  Errors: ${errors}\n")
endif()

# The files, in the listing's order (doctest's default: by file). Only the
# filename attributes are taken: a test case's name may hold '[', ']' or ';',
# which a CMake list would split or join (XML escapes its quotes, so no name
# holds the text filename=").
string(REGEX MATCHALL "filename=\"[^\"\n]*\"" cases "${output}")
set(files "")
foreach(tc IN LISTS cases)
  string(REGEX REPLACE "^filename=\"([^\"]*)\"$" "\\1" file "${tc}")
  if(file MATCHES "[][&;,*?]")
    message(FATAL_ERROR "test file path '${file}' has a character doctest's --source-file filter or CTest cannot take")
  endif()
  list(FIND files "${file}" seen)
  if(seen EQUAL -1)
    list(APPEND files "${file}")
  endif()
endforeach()
list(LENGTH files count)
if(count EQUAL 0)
  message(FATAL_ERROR "'${TEST_EXECUTABLE}' --list-test-cases listed no test case")
endif()

# Test names: each file's path below the folder all of them share.
list(GET files 0 common)
get_filename_component(common "${common}" DIRECTORY)
foreach(file IN LISTS files)
  string(FIND "${file}" "${common}/" at)
  while(NOT at EQUAL 0 AND NOT common STREQUAL "" AND NOT common STREQUAL "/")
    get_filename_component(common "${common}" DIRECTORY)
    string(FIND "${file}" "${common}/" at)
  endwhile()
endforeach()

# A CMake argument for `value`: bare when plain, else a bracket argument.
function(heed_ctest_arg out value)
  if(value MATCHES "[^-./:a-zA-Z0-9_=]")
    set(${out} "[==[${value}]==]" PARENT_SCOPE)
  else()
    set(${out} "${value}" PARENT_SCOPE)
  endif()
endfunction()

set(extra_args "")
foreach(arg IN LISTS TEST_EXTRA_ARGS)
  heed_ctest_arg(a "${arg}")
  string(APPEND extra_args " ${a}")
endforeach()
set(properties "")
foreach(prop IN LISTS TEST_PROPERTIES)
  heed_ctest_arg(a "${prop}")
  string(APPEND properties " ${a}")
endforeach()
heed_ctest_arg(executor_arg "${TEST_EXECUTOR}")
if(TEST_EXECUTOR STREQUAL "")
  set(executor_arg "")
endif()
heed_ctest_arg(exe_arg "${TEST_EXECUTABLE}")
heed_ctest_arg(wd_arg "${TEST_WORKING_DIR}")

set(script "")
set(names "")
foreach(file IN LISTS files)
  file(RELATIVE_PATH rel "${common}" "${file}")
  set(name "${TEST_PREFIX}${rel}${TEST_SUFFIX}")
  heed_ctest_arg(filter_arg "--source-file=${file}")
  string(APPEND script
    "add_test([==[${name}]==] ${executor_arg} ${exe_arg} ${filter_arg}${extra_args})\n"
    "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY ${wd_arg}${properties})\n")
  string(APPEND names " [==[${name}]==]")
endforeach()

# The list of the tests, for setting properties on them from CTest.
string(APPEND script "set(${TEST_LIST}${names})\n")
file(WRITE "${CTEST_FILE}" "${script}")
