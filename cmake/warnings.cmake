# Project-wide warning and sanitizer flags, applied through an interface target so that
# third-party code (libtorch headers) can be kept out of them.
add_library(ddprun_flags INTERFACE)
target_compile_options(ddprun_flags INTERFACE
  -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual
  -Wimplicit-fallthrough -Wswitch)
if(DDPRUN_WERROR)
  target_compile_options(ddprun_flags INTERFACE -Werror)
endif()
if(DDPRUN_SANITIZE)
  target_compile_options(ddprun_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer)
  target_link_options(ddprun_flags INTERFACE -fsanitize=address,undefined)
endif()
# Boost.Process v2 is compiled into ddprun_agent (process/boost_process_src.cpp) with
# std::filesystem, so no Boost library is linked.
target_compile_definitions(ddprun_flags INTERFACE
  BOOST_PROCESS_USE_STD_FS BOOST_PROCESS_V2_SEPARATE_COMPILATION BOOST_ASIO_NO_DEPRECATED)
if(DDPRUN_FUZZ)
  # Coverage instrumentation for the code under fuzz; the fuzz target adds the fuzzer runtime.
  target_compile_options(ddprun_flags INTERFACE -fsanitize=fuzzer-no-link,address,undefined)
  target_link_options(ddprun_flags INTERFACE -fsanitize=address,undefined)
endif()
