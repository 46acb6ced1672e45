# The layers of Giant, each its own static library, linked in one direction.
#
#   giant_layer(NAME name [USES lower layers...] HEADERS public headers...
#               [SHARES internal headers...])
#
# declares layer `name` (the folder of the same name holds its sources and
# internal headers; its CMakeLists adds the sources to giant_<name>) and
# what it may use. Public headers are named from include/giant/ without
# ".h" ("log" for the user's API, "engine/comm" for the engine's); SHARES
# names internal headers by their path from the source root
# ("parallel/dp_sync.h"): not part of libgiant's API, but the layers above
# may include them. The wall is the include path: a layer's sources see
#   - the public headers (include/giant/*.h, include/giant/engine/*.h) of
#     the layers it uses and its own, and no others;
#   - the shared internal headers of the layers it uses;
#   - its own folder (for "<name>/...h" internal headers), and no other's,
# through a folder of links made for it in the build tree. A file that
# reaches up, or into another layer's internals, fails to compile with
# "No such file". USES lists every layer below that it may use, directly
# or not; `giant_layer_check` makes sure nothing is left out.
#
# libgiant.so is the layers together (GIANT_LIBRARY_LAYERS), built with
# hidden visibility: it exports what the public headers declare and nothing
# else (include/giant/status.h, GT_API_BEGIN).
set(GIANT_LAYERS "")

function(giant_layer)
  cmake_parse_arguments(L "" "NAME" "USES;HEADERS;SHARES" ${ARGN})
  set(name ${L_NAME})
  set(inc ${PROJECT_BINARY_DIR}/layers/${name})
  file(REMOVE_RECURSE ${inc})
  file(MAKE_DIRECTORY ${inc}/giant)
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${name} ${inc}/${name} SYMBOLIC)
  set(headers ${L_HEADERS})
  set(shared "")
  foreach(lower ${L_USES})
    if(NOT lower IN_LIST GIANT_LAYERS)
      message(FATAL_ERROR "layer ${name} uses ${lower}, which is not a layer declared before it")
    endif()
    list(APPEND headers ${GIANT_LAYER_${lower}_HEADERS})
    list(APPEND shared ${GIANT_LAYER_${lower}_SHARES})
  endforeach()
  foreach(h ${headers})
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/include/giant/${h}.h)
      message(FATAL_ERROR "layer ${name}: no public header include/giant/${h}.h")
    endif()
    get_filename_component(dir ${inc}/giant/${h}.h DIRECTORY)
    file(MAKE_DIRECTORY ${dir})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/giant/${h}.h ${inc}/giant/${h}.h SYMBOLIC)
  endforeach()
  foreach(h ${L_SHARES})
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/${h} OR NOT h MATCHES "^${name}/")
      message(FATAL_ERROR "layer ${name} shares ${h}, which is not a header in its folder")
    endif()
  endforeach()
  foreach(h ${shared})
    get_filename_component(dir ${inc}/${h} DIRECTORY)
    file(MAKE_DIRECTORY ${dir})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${h} ${inc}/${h} SYMBOLIC)
  endforeach()

  add_library(giant_${name} STATIC)
  # Only the layer's own wall: nothing here is INTERFACE, so a layer above
  # does not inherit a lower layer's view.
  target_include_directories(giant_${name} PRIVATE ${inc})
  foreach(lower ${L_USES})
    target_link_libraries(giant_${name} PUBLIC giant_${lower})
  endforeach()

  set(GIANT_LAYER_${name}_HEADERS ${L_HEADERS} PARENT_SCOPE)
  set(GIANT_LAYER_${name}_USES ${L_USES} PARENT_SCOPE)
  set(GIANT_LAYER_${name}_SHARES ${L_SHARES} PARENT_SCOPE)
  list(APPEND GIANT_LAYERS ${name})
  set(GIANT_LAYERS ${GIANT_LAYERS} PARENT_SCOPE)
endfunction()

# Every public header belongs to exactly one layer; a new header that no
# layer claims would be invisible to every layer, so say so at configure.
function(giant_layer_check)
  file(GLOB all RELATIVE ${PROJECT_SOURCE_DIR}/include/giant ${PROJECT_SOURCE_DIR}/include/giant/*.h
       ${PROJECT_SOURCE_DIR}/include/giant/engine/*.h)
  set(claimed giant.h engine.h)
  foreach(layer ${GIANT_LAYERS})
    foreach(h ${GIANT_LAYER_${layer}_HEADERS})
      if("${h}.h" IN_LIST claimed)
        message(FATAL_ERROR "include/giant/${h}.h is claimed by two layers")
      endif()
      list(APPEND claimed ${h}.h)
    endforeach()
  endforeach()
  foreach(h ${all})
    if(NOT h IN_LIST claimed)
      message(FATAL_ERROR "include/giant/${h} belongs to no layer: add it to a giant_layer() in CMakeLists.txt")
    endif()
  endforeach()
endfunction()
