#pragma once
// Boost.Process v2 (header-only, std::filesystem). Boost 1.81's v2 headers rely on
// boost::optional and Boost.TypeTraits being included by Boost.Filesystem, which we do not use
// (BOOST_PROCESS_USE_STD_FS); include them first so the headers compile on their own.

#include <boost/optional.hpp>
#include <boost/type_traits.hpp>

#include <boost/process/v2.hpp>
