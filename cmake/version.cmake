# Writes OUT, a header defining DDPRUN_VERSION: `git describe` of SOURCE_DIR when it is a git
# checkout with a release tag (v0.2.0 -> "0.2.0", "0.2.0-5-g<sha>" five commits after it), else
# RELEASE with the commit ("0.1.0-g<sha>"), "-dirty" when tracked files differ from it; RELEASE
# alone outside git. Run at every build (cmake -P), it rewrites OUT only when the text changes,
# so a build of the same tree recompiles nothing.
execute_process(COMMAND git -C "${SOURCE_DIR}" describe --tags --match "v[0-9]*" --dirty --abbrev=12
                OUTPUT_VARIABLE described RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(rc EQUAL 0)
  string(REGEX REPLACE "^v" "" version "${described}")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE sha RESULT_VARIABLE rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0)
    set(version "${RELEASE}-g${sha}")
    execute_process(COMMAND git -C "${SOURCE_DIR}" diff --quiet HEAD --
                    RESULT_VARIABLE dirty ERROR_QUIET)
    if(NOT dirty EQUAL 0)
      string(APPEND version "-dirty")
    endif()
  else()
    set(version "${RELEASE}")
  endif()
endif()
set(content "#define DDPRUN_VERSION \"${version}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
