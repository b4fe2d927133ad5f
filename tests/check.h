/* Minimal test assertions: each failure prints both values with file and line. */
#ifndef TPU_TESTS_CHECK_H
#define TPU_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures_;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      check_failures_++;                                                       \
    }                                                                          \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                                  \
  do {                                                                                      \
    long long ca_ = (long long)(a), cb_ = (long long)(b);                                   \
    if (ca_ != cb_) {                                                                       \
      fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %lld, %s = %lld\n", __FILE__, __LINE__, \
              #a, ca_, #b, cb_);                                                            \
      check_failures_++;                                                                    \
    }                                                                                       \
  } while (0)

#define CHECK_EQ_STR(a, b)                                                                     \
  do {                                                                                         \
    const char *ca_ = (a), *cb_ = (b);                                                         \
    if (!ca_ || !cb_ || strcmp(ca_, cb_) != 0) {                                               \
      fprintf(stderr, "%s:%d: CHECK_EQ_STR failed:\n  %s = \"%s\"\n  %s = \"%s\"\n", __FILE__, \
              __LINE__, #a, ca_ ? ca_ : "(null)", #b, cb_ ? cb_ : "(null)");                   \
      check_failures_++;                                                                       \
    }                                                                                          \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                                  \
  do {                                                                                         \
    double ca_ = (double)(a), cb_ = (double)(b);                                               \
    if (!(ca_ - cb_ <= (tol) && cb_ - ca_ <= (tol))) {                                         \
      fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.17g, %s = %.17g (tol %g)\n", __FILE__, \
              __LINE__, #a, ca_, #b, cb_, (double)(tol));                                      \
      check_failures_++;                                                                       \
    }                                                                                          \
  } while (0)

#define CHECK_DONE()                                                  \
  do {                                                                \
    if (check_failures_) {                                            \
      fprintf(stderr, "%d check(s) failed\n", check_failures_);       \
      return 1;                                                       \
    }                                                                 \
    printf("all checks passed\n");                                    \
    return 0;                                                         \
  } while (0)

#endif
