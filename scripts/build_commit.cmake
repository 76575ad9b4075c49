# Run at every build (cmake -P, from the build_commit target): writes OUT, a header defining
# CNNRUN_BUILD_COMMIT as the source tree's commit (12 hex digits, "-dirty" when tracked files
# differ from it; "unknown" without git or outside a work tree), rewriting it only when that
# changes, so that an unchanged tree rebuilds nothing. Reports and `--version` name it, so a
# benchmark table names the binary's commit rather than whatever checkout ran it.
execute_process(COMMAND git -C "${SRC}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes RESULT_VARIABLE rc2 ERROR_QUIET)
  if(NOT rc2 EQUAL 0 OR NOT changes STREQUAL "")
    set(commit "${commit}-dirty")
  endif()
endif()
set(text "#pragma once\n#define CNNRUN_BUILD_COMMIT \"${commit}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
