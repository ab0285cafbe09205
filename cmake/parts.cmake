# The parts of the source tree and the order between them, held by the build.
#
# A part is a folder (common, store, etcd, rendezvous, process, topology, agent, cluster, monitor,
# launcher, workers, testing) whose headers are included as "<folder>/<name>.hpp". The project's root is on no include
# path. Instead each part's folder is reached through a directory of the build tree that holds
# nothing but a link to that one folder, and that directory is a PUBLIC include directory of the
# part's targets. A target therefore sees the headers of the parts it links, directly or through
# them, and no others: an include that climbs (store/ including agent/, say) fails to compile
# instead of quietly tying the layers together.
#
# The order (docs/architecture.md):
#   common <- store <- etcd <- rendezvous <- agent <- cluster <- launcher
#   common <- process <- agent
#   agent, process, store <- monitor <- launcher
#   common <- topology <- launcher
#   common <- workers
#   common, etcd <- testing (tests and benchmarks only)

# Makes `folder`'s headers visible to `target` and to whatever links it.
function(ddprun_part target folder)
  set(dir "${PROJECT_BINARY_DIR}/parts/${folder}")
  if(NOT EXISTS "${dir}/${folder}")
    file(MAKE_DIRECTORY "${dir}")
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${folder}" "${dir}/${folder}" SYMBOLIC)
  endif()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    target_include_directories(${target} INTERFACE "${dir}")
  else()
    target_include_directories(${target} PUBLIC "${dir}")
  endif()
endfunction()
