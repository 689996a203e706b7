# The warning set of docs/conventions.md §8, each flag only if the compiler knows it.
include(CheckCCompilerFlag)

set(_ur_warnings
  -Wall -Wextra -Wpedantic -Wshadow -Wcast-qual -Wpointer-arith -Wstrict-prototypes
  -Wmissing-prototypes -Wmissing-declarations -Wold-style-definition -Wredundant-decls
  -Wnested-externs -Wundef -Wwrite-strings -Wformat=2 -Wvla -Wimplicit-fallthrough
  -Wconversion -Wno-sign-conversion -Wdouble-promotion -Wnull-dereference
  -Werror=implicit-function-declaration -fno-common)
if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
  list(APPEND _ur_warnings -Wcast-align=strict)
else()
  list(APPEND _ur_warnings -Wcast-align)
endif()

set(UR_WARNING_FLAGS "")
foreach(flag IN LISTS _ur_warnings)
  string(MAKE_C_IDENTIFIER "UR_HAS${flag}" var)
  check_c_compiler_flag(${flag} ${var})
  if(${var})
    list(APPEND UR_WARNING_FLAGS ${flag})
  endif()
endforeach()
if(UR_WERROR)
  list(APPEND UR_WARNING_FLAGS -Werror)
endif()

# Project code gets the full set; tests get it too, minus what cmocka's macros trip.
function(ur_warnings target)
  target_compile_options(${target} PRIVATE ${UR_WARNING_FLAGS})
endfunction()
