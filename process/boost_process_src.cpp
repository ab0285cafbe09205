// Boost.Process v2's compiled part, built once here (BOOST_PROCESS_V2_SEPARATE_COMPILATION):
// header-only mode in Boost 1.81 leaves some initializers undefined at link time.
#include <boost/optional.hpp>
#include <boost/type_traits.hpp>

#include <boost/process/v2/src.hpp>
