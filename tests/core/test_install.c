/* `cmake --install` puts the library, the headers and giant.pc under a
 * prefix, and a program built with pkg-config's flags for giant links and
 * runs against it. argv: cmake, the C compiler, pkg-config, and optionally
 * one more compiler flag. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/run_cmd.h"

static char *tool_cmake, *tool_cc, *tool_pkgconfig, *extra_flag;

static void run_ok(char *const argv[], char *const env[], run_result *r) {
  /* An install, or a compile and link of a small program: 1-5 s on busy
   * cores; 300 s. */
  run_cmd(argv, env, 300, r);
  if (r->exit_code != 0) run_fail(r, "%s exited %d, its output above", argv[0], r->exit_code);
}

static void test_installed_library_builds_a_program(void **state) {
  (void)state;
  char prefix[] = "/tmp/giant-install-XXXXXX", build[512], src[600], exe[600], pcdir[600], env_pc[700];
  assert_non_null(mkdtemp(prefix));
  run_result r;
  build_path("", build, sizeof build);
  run_ok((char *[]){tool_cmake, "--install", build, "--prefix", prefix, NULL}, NULL, &r);
  snprintf(src, sizeof src, "%s/main.c", prefix);
  snprintf(exe, sizeof exe, "%s/main", prefix);
  FILE *f = fopen(src, "w");
  fputs(
      "#include <giant/giant.h>\n#include <stdio.h>\n"
      "int main(void) { gt_backend *be; if (gt_backend_create(NULL, &be) != GT_OK) return 1;\n"
      "  printf(\"%s %s\\n\", gt_backend_name(be), gt_status_name(GT_ERANGE)); gt_backend_destroy(be); return 0; }\n",
      f);
  fclose(f);
  snprintf(pcdir, sizeof pcdir, "%s/lib/pkgconfig", prefix);
  if (access(pcdir, F_OK) != 0) snprintf(pcdir, sizeof pcdir, "%s/lib/x86_64-linux-gnu/pkgconfig", prefix);
  snprintf(env_pc, sizeof env_pc, "PKG_CONFIG_PATH=%s", pcdir);
  run_ok((char *[]){tool_pkgconfig, "--cflags", "--libs", "giant", NULL}, (char *[]){env_pc, NULL}, &r);
  char flags[1024];
  size_t len = strnlen(r.output, sizeof flags - 1);
  memcpy(flags, r.output, len);
  flags[len] = '\0';
  flags[strcspn(flags, "\n")] = '\0';
  char *args[32] = {tool_cc, "-std=c11", "-o", exe, src};
  int n = 5;
  if (extra_flag) args[n++] = extra_flag; /* a sanitized library needs its runtime */
  for (char *tok = strtok(flags, " "); tok && n < 28; tok = strtok(NULL, " ")) args[n++] = tok;
  char rpath[700];
  snprintf(rpath, sizeof rpath, "-Wl,-rpath,%s/..", pcdir);
  args[n++] = rpath;
  args[n] = NULL;
  run_ok(args, NULL, &r);
  run_ok((char *[]){exe, NULL}, NULL, &r);
  assert_string_equal(r.output, "cpu GT_ERANGE\n");
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", prefix);
  assert_int_equal(system(cmd), 0);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: test_install CMAKE CC PKG_CONFIG\n");
    return 2;
  }
  tool_cmake = argv[1];
  tool_cc = argv[2];
  tool_pkgconfig = argv[3];
  extra_flag = argc > 4 && argv[4][0] ? argv[4] : NULL;
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_installed_library_builds_a_program)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
