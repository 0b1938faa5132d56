# ctest script: a bench run fills an empty cache, `cache list` shows it, `cache clear` empties it.
#
#   cmake -DEXE=<tessel> -DCACHE=<folder> -P cache_roundtrip.cmake
cmake_minimum_required(VERSION 3.20)

set(ENV{TESSEL_CACHE_DIR} "${CACHE}")
file(REMOVE_RECURSE "${CACHE}")

function(run_tessel out_var)
  execute_process(COMMAND "${EXE}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
    ERROR_VARIABLE err)
  message(STATUS "tessel ${ARGN}: exit code ${rc}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tessel ${ARGN} failed with exit code ${rc}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

run_tessel(out cache list)
if(NOT out STREQUAL "")
  message(FATAL_ERROR "a fresh cache should list nothing on stdout")
endif()
run_tessel(out bench gauss-sum --n 200 --reps 1 --no-pykeops --keep-cache)
run_tessel(out cache list)
if(NOT out MATCHES "^[0-9a-f]+ [0-9]+ [^\n]+\\.so\n")
  message(FATAL_ERROR "`cache list` should print `key bytes path` lines after a bench run")
endif()
run_tessel(out cache clear)
if(NOT out MATCHES "^removed [1-9][0-9]* cached kernel")
  message(FATAL_ERROR "`cache clear` should say how many kernels it removed")
endif()
run_tessel(out cache list)
if(NOT out STREQUAL "")
  message(FATAL_ERROR "`cache list` should print nothing after `cache clear`")
endif()
