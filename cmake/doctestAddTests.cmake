# cmake/doctestAddTests.cmake: the script doctest_discover_tests() runs after
# each build of a test binary to turn its --list-test-cases into CTest tests.
#
# Replaces the one shipped with doctest 2.4.9 (tests/CMakeLists.txt points
# doctest.cmake here), which splits the listing into a CMake list: a test name
# with an unbalanced '[' or ']' (e.g. "randint covers [lo, hi)") swallows every
# later name into one bogus test and ctest stops on "add_test called with
# incorrect number of arguments". Here each line is handled as a string, with
# '[', ']' and ';' hidden while the listing is split into lines.
#
# Accepts the same -D variables as doctest's script; ADD_LABELS and
# JUNIT_OUTPUT_DIR are not supported (heed uses neither).

if(TEST_ADD_LABELS OR TEST_JUNIT_OUTPUT_DIR)
  message(FATAL_ERROR "heed's doctestAddTests.cmake supports neither ADD_LABELS nor JUNIT_OUTPUT_DIR")
endif()
if(NOT EXISTS "${TEST_EXECUTABLE}")
  message(FATAL_ERROR "Specified test executable '${TEST_EXECUTABLE}' does not exist")
endif()

set(spec)
if("${TEST_SPEC}" MATCHES .)
  set(spec "--test-case=${TEST_SPEC}")
endif()
execute_process(
  COMMAND ${TEST_EXECUTOR} "${TEST_EXECUTABLE}" ${spec} --list-test-cases
  OUTPUT_VARIABLE output
  ERROR_VARIABLE errors
  RESULT_VARIABLE result
  WORKING_DIRECTORY "${TEST_WORKING_DIR}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "Error running test executable '${TEST_EXECUTABLE}' --list-test-cases:\n"
                      "  Result: ${result}\n  Output: ${output}\n  Errors: ${errors}\n")
endif()

# A CMake argument for `value`: bare when plain, else a bracket argument.
function(heed_ctest_arg out value)
  if(value MATCHES "[^-./:a-zA-Z0-9_]")
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

string(ASCII 1 LB)
string(ASCII 2 RB)
string(ASCII 3 SC)
string(REPLACE "[" "${LB}" output "${output}")
string(REPLACE "]" "${RB}" output "${output}")
string(REPLACE ";" "${SC}" output "${output}")
string(REPLACE "\n" ";" lines "${output}")

set(script "")
set(names "")
set(count 0)
foreach(line IN LISTS lines)
  string(REPLACE "${LB}" "[" line "${line}")
  string(REPLACE "${RB}" "]" line "${line}")
  string(REPLACE "${SC}" ";" line "${line}")
  if(line STREQUAL "" OR line MATCHES "^===+$" OR line MATCHES "^\\[doctest\\] ")
    continue()
  endif()
  if(line MATCHES "]==]")
    message(FATAL_ERROR "test case name '${line}' contains ']==]', which CTest files cannot quote")
  endif()
  set(name "${TEST_PREFIX}${line}${TEST_SUFFIX}")
  # doctest's --test-case takes a comma-separated list of wildcard patterns.
  string(REPLACE "," "\\," filter "${line}")
  heed_ctest_arg(filter_arg "--test-case=${filter}")
  string(APPEND script
    "add_test([==[${name}]==] ${executor_arg} ${exe_arg} ${filter_arg}${extra_args})\n"
    "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY ${wd_arg}${properties})\n")
  string(APPEND names " [==[${name}]==]")
  math(EXPR count "${count} + 1")
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "'${TEST_EXECUTABLE}' --list-test-cases listed no test case")
endif()

# The list of the tests, for setting properties on them from CTest.
string(APPEND script "set(${TEST_LIST}${names})\n")
file(WRITE "${CTEST_FILE}" "${script}")
