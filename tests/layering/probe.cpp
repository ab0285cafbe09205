// Compiled only by the layering tests (tests/layering_tests.cmake): PROBE_HEADER is a header of
// a part that the probe's target does not link, so this must fail to compile.
#include PROBE_HEADER
