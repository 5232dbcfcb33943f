# cmake -DSOURCE_DIR=<heed> -DOUT=<header> -P git_commit.cmake: writes the
# commit heed is being built from into OUT, as HEED_GIT_COMMIT (12 hex
# digits, or "unknown" outside a git checkout). Run at every build, not only
# when CMake configures, so a log never records an older commit; OUT is
# rewritten only when the commit changed, so a new commit recompiles one file
# (data/run.cpp) and an unchanged one nothing.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR NOT commit)
  set(commit unknown)
endif()
set(text "#define HEED_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
