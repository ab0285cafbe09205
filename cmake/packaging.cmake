# Installing and packaging. `cmake --install` puts ddprun, ddprun-store and, when built,
# ddp_resnet under the prefix, with man pages made from the programs' own --help (help2man, so
# they cannot drift) and bash completion. CPack makes two Debian packages: `ddprun` (the
# launcher, the store, the man pages and the completion) and `ddprun-workers` (ddp_resnet,
# which needs libtorch). scripts/package.sh builds both.
include(GNUInstallDirs)
# Installing and packaging build nothing: scripts/package.sh builds the installed targets first.
# Otherwise cpack would rebuild the whole tree, relinking ddprun (its version names the commit)
# while other programs, tests among them, run it.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

install(TARGETS ddprun ddprun-store RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT launcher)
install(FILES ${PROJECT_SOURCE_DIR}/scripts/completion/ddprun
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions COMPONENT launcher)
set(ddprun_components launcher)
if(TARGET ddp_resnet)
  install(TARGETS ddp_resnet RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT workers)
  list(APPEND ddprun_components workers)
endif()

find_program(DDPRUN_HELP2MAN help2man)
if(DDPRUN_HELP2MAN)
  set(man_dir ${PROJECT_BINARY_DIR}/man)
  set(man_pages)
  foreach(entry "ddprun|launch and supervise distributed PyTorch workers (torchrun-compatible)"
                "ddprun-store|the TCP key-value store ddprun agents rendezvous through")
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 program)
    list(GET parts 1 summary)
    add_custom_command(OUTPUT ${man_dir}/${program}.1.gz
      COMMAND ${CMAKE_COMMAND} -E make_directory ${man_dir}
      COMMAND ${DDPRUN_HELP2MAN} --no-info --name=${summary} --output=${man_dir}/${program}.1
              $<TARGET_FILE:${program}>
      COMMAND gzip -9nf ${man_dir}/${program}.1
      DEPENDS ${program}
      COMMENT "man page of ${program} (help2man)"
      VERBATIM)
    list(APPEND man_pages ${man_dir}/${program}.1.gz)
  endforeach()
  add_custom_target(man_pages ALL DEPENDS ${man_pages})
  install(FILES ${man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT launcher)
else()
  message(STATUS "help2man not found: no man pages (scripts/install-deps.sh installs help2man)")
endif()

# The package's version: the release and, from git, the commit ("0.1.0+g<sha>"), so that two
# packages of different commits never share a version.
execute_process(COMMAND git -C "${PROJECT_SOURCE_DIR}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE ddprun_commit RESULT_VARIABLE ddprun_git
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
if(ddprun_git EQUAL 0)
  set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}+g${ddprun_commit}")
endif()
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ddprun)
set(CPACK_PACKAGE_VENDOR "ddprun developers")
set(CPACK_PACKAGE_CONTACT "ddprun developers <ddprun@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "native C++ torchrun: launch and supervise distributed PyTorch workers")
set(CPACK_COMPONENTS_ALL ${ddprun_components})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_STRIP_FILES ON)
# dpkg-shlibdeps computes Depends from what the binaries link (glibc; libtorch for
# ddp_resnet).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_NAME ddprun)
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_SECTION utils)
# libcrypto is loaded on first use (a store secret), so no linker record shows it: declared.
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_DEPENDS "libssl3")
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_RECOMMENDS "gdb, python3.11-dbg, openssh-client")
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_SUGGESTS "python3-torch, etcd-server, bash-completion")
set(CPACK_COMPONENT_LAUNCHER_DESCRIPTION
    "launcher and store of ddprun, a native C++ torchrun\n The same command line and worker environment as torchrun, without Python in the\n launcher: ddprun, ddprun-store, their man pages and bash completion.")
set(CPACK_DEBIAN_WORKERS_PACKAGE_NAME ddprun-workers)
set(CPACK_DEBIAN_WORKERS_PACKAGE_SECTION science)
set(CPACK_COMPONENT_WORKERS_DESCRIPTION
    "ddp_resnet, ddprun's C++ DDP ResNet worker\n ResNet training with libtorch's distributed data parallelism: NCCL on GPUs, Gloo on\n CPUs, with checkpoints that resume across restarts.")
include(CPack)
