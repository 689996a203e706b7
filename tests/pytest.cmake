# ur_pytest_files(<label> <dir>): one CTest test per tests/<dir>/test_*.py, run by pytest against
# this build's unroll (labels: <label> and pytest), so that `ctest` is the whole suite and
# `ctest -j` runs the Python files side by side. The interpreter is UR_PYTHON (default: the
# .venv that scripts/setup.sh --tests makes); without it the tests are not registered and
# configure says so.
set(UR_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python with the packages of tests/interop/requirements.txt (pytest, jax, orbax, tensorstore)")
if(DEFINED ENV{UNROLL_FIXTURE_CACHE})
  set(_ur_cache_default "$ENV{UNROLL_FIXTURE_CACHE}")
else()
  set(_ur_cache_default "${CMAKE_BINARY_DIR}/fixtures")
endif()
set(UR_FIXTURE_CACHE "${_ur_cache_default}" CACHE PATH
    "Where the interop tests cache the checkpoints they generate with Orbax")

function(ur_pytest_files label dir)
  if(NOT EXISTS "${UR_PYTHON}")
    message(STATUS "${label} tests not registered: no ${UR_PYTHON} (run scripts/setup.sh --tests)")
    return()
  endif()
  file(GLOB files RELATIVE "${PROJECT_SOURCE_DIR}/${dir}" CONFIGURE_DEPENDS
       "${PROJECT_SOURCE_DIR}/${dir}/test_*.py")
  foreach(f ${files})
    string(REGEX REPLACE "^test_(.*)\\.py$" "\\1" stem "${f}")
    add_test(NAME ${label}.${stem}
             COMMAND "${UR_PYTHON}" -m pytest -q -p no:cacheprovider "${dir}/${f}"
             WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}")
    set_tests_properties(${label}.${stem} PROPERTIES
      LABELS "${label};pytest"
      TIMEOUT 3600
      ENVIRONMENT "UNROLL_BIN=$<TARGET_FILE:unroll>;UNROLL_BUILD_DIR=${CMAKE_BINARY_DIR};UNROLL_FIXTURE_CACHE=${UR_FIXTURE_CACHE}")
  endforeach()
endfunction()
