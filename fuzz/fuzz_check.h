// What every fuzz target shares: a check that aborts (libFuzzer saves the input as a crash) when
// a property the decoders promise does not hold.
#pragma once

#include <cstdio>
#include <cstdlib>

#define C4_FUZZ_CHECK(cond)                                                                 \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)
