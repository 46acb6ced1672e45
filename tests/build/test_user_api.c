/* The examples are users of the library, and use the user's API alone:
 * every source file of examples/ includes nothing of Giant's but
 * "giant/giant.h" (and its own folder's headers), and compiles with only
 * the user-level include folder on its path (include/giant/ without
 * engine/, which the build links into include-user/).
 *
 * usage: test_user_api CC USER_INCLUDE_DIR EXAMPLES_DIR
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "common/run_cmd.h"

static const char *cc, *user_include, *examples_dir;

/* Fails unless every quoted include of `path` is giant/giant.h or a file
 * of the same folder. */
static void check_includes(const char *path, const char *dir) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    const char *q = strstr(line, "#include \"");
    if (!q || q != line) continue;
    char name[512];
    if (sscanf(q + 10, "%511[^\"]", name) != 1) continue;
    if (!strcmp(name, "giant/giant.h")) continue;
    char local[1600];
    snprintf(local, sizeof local, "%s/%s", dir, name);
    struct stat st;
    if (!strchr(name, '/') && stat(local, &st) == 0) continue;
    fclose(f);
    fail_msg("%s includes \"%s\": an example includes only giant/giant.h and its own headers", path, name);
  }
  fclose(f);
}

/* Compiles `path` with the user's folder and its own folder on the
 * include path, and nothing else of Giant's. */
static void check_compiles(const char *path, const char *dir) {
  char inc_user[1100], inc_dir[1100];
  snprintf(inc_user, sizeof inc_user, "-I%s", user_include);
  snprintf(inc_dir, sizeof inc_dir, "-I%s", dir);
  char *argv[] = {(char *)cc,      "-std=c11", "-D_GNU_SOURCE", "-Wall",      "-Wextra", "-Werror",
                  "-fsyntax-only", inc_user,   inc_dir,         (char *)path, NULL};
  run_result *r = malloc(sizeof *r);
  assert_non_null(r);
  run_cmd(argv, NULL, 120, r);
  if (r->exit_code != 0) run_fail(r, "%s does not compile with the user's API alone (%s)", path, user_include);
  free(r);
}

static void examples_use_the_user_api(void **state) {
  (void)state;
  DIR *top = opendir(examples_dir);
  assert_non_null(top);
  int sources = 0, headers = 0;
  struct dirent *e;
  while ((e = readdir(top))) {
    if (e->d_name[0] == '.') continue;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", examples_dir, e->d_name);
    DIR *d = opendir(dir);
    if (!d) continue; /* CMakeLists.txt */
    struct dirent *f;
    while ((f = readdir(d))) {
      size_t len = strlen(f->d_name);
      bool is_c = len > 2 && !strcmp(f->d_name + len - 2, ".c");
      bool is_h = len > 2 && !strcmp(f->d_name + len - 2, ".h");
      if (!is_c && !is_h) continue;
      char path[1400];
      snprintf(path, sizeof path, "%s/%s", dir, f->d_name);
      check_includes(path, dir);
      if (is_c) {
        check_compiles(path, dir);
        sources++;
      } else {
        headers++;
      }
    }
    closedir(d);
  }
  closedir(top);
  /* gpt and custom_layer: two programs and their model files. */
  assert_true(sources >= 4);
  assert_true(headers >= 2);
}

/* The user's folder holds the user's API and not the engine's. */
static void user_folder_has_no_engine(void **state) {
  (void)state;
  char path[1200];
  struct stat st;
  snprintf(path, sizeof path, "%s/giant/giant.h", user_include);
  assert_int_equal(stat(path, &st), 0);
  snprintf(path, sizeof path, "%s/giant/engine", user_include);
  assert_int_not_equal(stat(path, &st), 0);
  snprintf(path, sizeof path, "%s/giant/engine.h", user_include);
  assert_int_not_equal(stat(path, &st), 0);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: test_user_api CC USER_INCLUDE_DIR EXAMPLES_DIR\n");
    return 2;
  }
  cc = argv[1];
  user_include = argv[2];
  examples_dir = argv[3];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(user_folder_has_no_engine),
      cmocka_unit_test(examples_use_the_user_api),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
