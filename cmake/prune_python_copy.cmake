# Removes from the build tree's copy of the Python package the .py files whose source is gone.
#
# The copy is refreshed file by file, so a module moved or deleted in python/tessel would stay
# importable from the build tree and hide an import still pointing at it. Run with
# cmake -DSRC=<python/tessel> -DDST=<build>/python/tessel -P prune_python_copy.cmake.
file(GLOB_RECURSE copied RELATIVE "${DST}" "${DST}/*.py")
foreach(rel IN LISTS copied)
  if(NOT EXISTS "${SRC}/${rel}")
    file(REMOVE "${DST}/${rel}")
  endif()
endforeach()
