# ctest script: `cmake --install` into a fresh prefix, find_package(tessel) from examples/cpp, run.
#
#   cmake -DBUILD_DIR=<tessel build> -DWORK_DIR=<scratch> -DEXAMPLES_DIR=<examples/cpp>
#         -DGENERATOR=<generator> -DCXX=<compiler> [-DCONFIG=<build type>] -P this.cmake
cmake_minimum_required(VERSION 3.20)

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "step failed (exit code ${rc}): ${cmd}\n${out}")
  endif()
  message(STATUS "${out}")
endfunction()

if(NOT CONFIG)
  set(CONFIG Release)
endif()
set(prefix "${WORK_DIR}/prefix")
set(example_build "${WORK_DIR}/examples-build")
# Start clean: a stale prefix could hide a file that the install rules forgot.
file(REMOVE_RECURSE "${prefix}" "${example_build}")

step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}" --config "${CONFIG}")
step(${CMAKE_COMMAND} -S "${EXAMPLES_DIR}" -B "${example_build}" -G "${GENERATOR}"
     "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_BUILD_TYPE=${CONFIG}")
step(${CMAKE_COMMAND} --build "${example_build}" --config "${CONFIG}")

foreach(example gauss_builder gauss_text kernel_ridge)
  set(exe "${example_build}/${example}")
  if(NOT EXISTS "${exe}")
    set(exe "${example_build}/${CONFIG}/${example}")  # multi-config generators
  endif()
  step("${exe}")
endforeach()
