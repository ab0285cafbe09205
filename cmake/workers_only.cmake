# DDPRUN_WORKERS_ONLY: libtorch is required, and fmt may come from it. A pip PyTorch ships fmt's
# headers beside its own (torch/include/fmt) and no libfmt to link, so without a system fmt the
# worker uses those headers in header-only mode.
find_package(Torch REQUIRED)
find_package(fmt QUIET)
if(NOT fmt_FOUND)
  if(NOT EXISTS "${TORCH_INSTALL_PREFIX}/include/fmt/format.h")
    message(FATAL_ERROR "DDPRUN_WORKERS_ONLY: fmt not found, and libtorch at "
                        "${TORCH_INSTALL_PREFIX} ships no fmt headers; install fmt (libfmt-dev)")
  endif()
  add_library(fmt::fmt INTERFACE IMPORTED)
  set_target_properties(fmt::fmt PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${TORCH_INSTALL_PREFIX}/include"
    INTERFACE_COMPILE_DEFINITIONS "FMT_HEADER_ONLY=1")
  message(STATUS "workers: using libtorch's fmt headers (header-only)")
endif()
