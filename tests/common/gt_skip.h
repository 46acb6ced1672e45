/* Skipped cases that ctest sees: include after <cmocka.h> (gt_test.h
 * includes it). */
#ifndef GIANT_TEST_SKIP_H
#define GIANT_TEST_SKIP_H

/* A case that cannot run here (no etcd, no openssl) calls SKIP_CASE(why):
 * CMocka skips it, but the group still exits 0 when the rest passed, and
 * ctest would show the program as passed though part of it never ran. So
 * the skip is counted, and main ends with
 *   return gt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
 * which returns the failures, or 77 (ctest: Skipped) when none failed and a
 * case was skipped. The count is the including file's own: the skipping
 * case and main are in one file. Where only some machines cannot run a
 * part (root, a second GPU), that part is better a ctest test of its own
 * (a group picked by argv[1]), so the rest still shows as passed. */
static inline int *gt_test_skips(void) {
  static int n;
  return &n;
}
#define SKIP_CASE(...)          \
  do {                          \
    print_message("skipped: "); \
    print_message(__VA_ARGS__); \
    print_message("\n");        \
    ++*gt_test_skips();         \
    skip();                     \
  } while (0)
static inline int gt_test_exit(int failed) { return failed ? failed : *gt_test_skips() ? 77 : 0; }

#endif
