/* libgiant.so exports its public API and nothing else: every dynamic symbol
 * it defines is a gt_ name declared in a public header (include/giant/ for
 * the user's API, include/giant/engine/ for the engine's).
 * The library is built with hidden visibility and the headers mark what
 * leaves it (GT_API_BEGIN), so an internal function, a kernel of one
 * instruction-set level or a generated protobuf table that showed up here
 * would be a symbol a user could bind to by accident.
 *
 * usage: test_exports NM LIBGIANT SOURCE_DIR
 */
#include <ctype.h>
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *nm, *lib, *source_dir;

/* Every identifier that starts with gt_ in the public headers, as
 * "\n<name>\n" entries of one string (a set good enough for a few hundred
 * names). */
static char *declared;
static size_t declared_len, declared_cap;

static void add_declared(const char *name, size_t n) {
  if (declared_len + n + 2 >= declared_cap) {
    declared_cap = 2 * declared_cap + n + 4096;
    declared = realloc(declared, declared_cap);
    assert_non_null(declared);
  }
  memcpy(declared + declared_len, name, n);
  declared_len += n;
  declared[declared_len++] = '\n';
  declared[declared_len] = '\0';
}

static bool is_declared(const char *name) {
  char key[520];
  snprintf(key, sizeof key, "\n%s\n", name);
  return strstr(declared, key) != NULL;
}

static void scan_header(const char *path) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  int c, prev = ' ';
  char word[256];
  size_t n = 0;
  while ((c = fgetc(f)) != EOF) {
    if (isalnum(c) || c == '_') {
      if (n == 0 && (isalnum(prev) || prev == '_')) continue; /* inside a longer word */
      if (n < sizeof word - 1) word[n++] = (char)c;
    } else {
      if (n > 3 && !strncmp(word, "gt_", 3)) add_declared(word, n);
      n = 0;
    }
    prev = c;
  }
  fclose(f);
}

/* Every header of one folder of the public API. */
static void scan_folder(const char *sub) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/include/%s", source_dir, sub);
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 3 || strcmp(e->d_name + len - 2, ".h")) continue;
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    scan_header(path);
  }
  closedir(d);
}

static void only_public_symbols(void **state) {
  (void)state;
  add_declared("", 0);
  /* The user's API and the engine's. */
  scan_folder("giant");
  scan_folder("giant/engine");

  /* popen, not run_cmd: the table can outgrow run_cmd's output buffer. */
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' -D --defined-only --format=just-symbols '%s'", nm, lib);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  int exported = 0, strays = 0;
  char strays_list[2048] = "", name[512];
  while (fgets(name, sizeof name, p)) {
    name[strcspn(name, "\n")] = '\0';
    if (!name[0]) continue;
    exported++;
    /* AddressSanitizer gives each exported variable a companion symbol,
     * __odr_asan.<name>, to catch two definitions of one global. */
    const char *base = !strncmp(name, "__odr_asan.", 11) ? name + 11 : name;
    if (!strncmp(base, "gt_", 3) && is_declared(base)) continue;
    strays++;
    size_t used = strlen(strays_list);
    snprintf(strays_list + used, sizeof strays_list - used, " %s", name);
  }
  assert_int_equal(pclose(p), 0);
  if (strays)
    fail_msg("%d of %d exported symbols are not declared in include/giant/:%s", strays, exported, strays_list);
  /* nm read the library, and it holds an API's worth of functions. */
  assert_true(exported > 100);
  assert_true(exported < 4000);
  free(declared);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: test_exports NM LIBGIANT SOURCE_DIR\n");
    return 2;
  }
  nm = argv[1];
  lib = argv[2];
  source_dir = argv[3];
  const struct CMUnitTest tests[] = {cmocka_unit_test(only_public_symbols)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
