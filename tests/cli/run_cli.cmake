# Runs one `tessel` command for ctest and checks its exit code, output text and JSON lines.
#
#   cmake -DEXE=<tessel> -DARGS="bench gauss-sum --n 100" [-DEXPECT_RC=0] [-DEXPECT_REGEX=...]
#         [-DJSON_CASE=gauss-sum -DJSON_KEYS="case;n;..."] -P run_cli.cmake
#
# EXPECT_REGEX is matched against stdout and stderr together. With JSON_CASE, stdout must be
# exactly one JSON object per line, and exactly one of them must hold JSON_CASE with all JSON_KEYS.
cmake_minimum_required(VERSION 3.20)

if(NOT DEFINED EXPECT_RC)
  set(EXPECT_RC 0)
endif()
separate_arguments(arg_list UNIX_COMMAND "${ARGS}")
execute_process(COMMAND "${EXE}" ${arg_list}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "tessel ${ARGS}\n--- stdout ---\n${out}--- stderr ---\n${err}--- exit code ${rc}")

if(NOT "${rc}" STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "expected exit code ${EXPECT_RC}, got ${rc}")
endif()
if(DEFINED EXPECT_REGEX AND NOT "${out}${err}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "output does not match the regular expression '${EXPECT_REGEX}'")
endif()

if(DEFINED JSON_CASE)
  string(STRIP "${out}" stripped)
  string(REPLACE "\n" ";" lines "${stripped}")
  set(found 0)
  foreach(line IN LISTS lines)
    string(JSON kind ERROR_VARIABLE json_err TYPE "${line}")
    if(json_err OR NOT kind STREQUAL "OBJECT")
      message(FATAL_ERROR "stdout line is not a JSON object: ${line} (${json_err})")
    endif()
    string(JSON name GET "${line}" case)
    if(name STREQUAL JSON_CASE)
      math(EXPR found "${found} + 1")
      foreach(key IN LISTS JSON_KEYS)
        string(JSON value ERROR_VARIABLE key_err GET "${line}" ${key})
        if(key_err)
          message(FATAL_ERROR "the ${JSON_CASE} line has no key '${key}': ${line}")
        endif()
      endforeach()
    endif()
  endforeach()
  if(NOT found EQUAL 1)
    message(FATAL_ERROR "expected exactly one JSON line for case ${JSON_CASE}, found ${found}")
  endif()
  list(LENGTH lines n_lines)
  if(DEFINED JSON_LINES AND NOT n_lines EQUAL JSON_LINES)
    message(FATAL_ERROR "expected ${JSON_LINES} lines on stdout, got ${n_lines}")
  endif()
endif()
