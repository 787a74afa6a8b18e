/* api/c/c_check.h: the C tests' check macro: CHECK(cond) reports a false condition with its
 * file and line and counts it in `failures`, which main reads at the end. One counter per test
 * program (a static here: include it from one file only). */
#ifndef WEFT_API_C_C_CHECK_H_
#define WEFT_API_C_C_CHECK_H_

#include <stdio.h>

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

#endif /* WEFT_API_C_C_CHECK_H_ */
