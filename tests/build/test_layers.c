/* The walls between layers hold: a layer's sources can include the public
 * headers of the layers it uses and its own, and nothing else, neither a
 * higher layer's public header nor another layer's internal one.
 *
 * For every layer and every public header, a one-line file that includes
 * the header is compiled with the layer's include path (the folder of
 * links cmake/GiantLayers.cmake makes); it must compile exactly when the
 * layer may use the header, and otherwise fail because the file is not
 * there. That also checks that each public header compiles on its own.
 * Public headers are named as in include/giant/ without ".h" ("log",
 * "engine/comm"); a layer's shared internal headers (SHARES) by their path
 * from the source root ("parallel/dp_sync.h"), and the same holds for them:
 * the layers above may include them, the layers below may not. Then each
 * layer tries one internal header of every other layer that it does not
 * share.
 *
 * usage: test_layers CC LAYERS_DIR SOURCE_DIR shared=p1,p2,... layer=h1,h2,... (lowest first)
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/run_cmd.h"

enum { MAX_LAYERS = 16, MAX_HEADERS = 96 };

typedef struct layer {
  char name[32];
  char allowed[1024]; /* ",h1,h2," */
} layer;

static const char *cc, *layers_dir, *source_dir;
static layer layers[MAX_LAYERS];
static int nlayers;
static char headers[MAX_HEADERS][64];
static char shared[2048]; /* ",p1,p2," */
static int nheaders;

/* Compiles `#include "<what>"` with layer l's include path; returns the
 * compiler's exit code and leaves its output in r. */
static int try_include(const layer *l, const char *what, run_result *r) {
  char src[] = "/tmp/giant-layer-XXXXXX.c";
  int fd = mkstemps(src, 2);
  assert_true(fd >= 0);
  char line[256];
  int n = snprintf(line, sizeof line, "#include \"%s\"\n", what);
  assert_int_equal(write(fd, line, (size_t)n), n);
  close(fd);
  char inc[512];
  snprintf(inc, sizeof inc, "-I%s/%s", layers_dir, l->name);
  char *argv[] = {(char *)cc, "-std=c11", "-D_GNU_SOURCE", "-fsyntax-only", inc, src, NULL};
  run_cmd(argv, NULL, 120, r);
  unlink(src);
  return r->exit_code;
}

static void public_headers(void **state) {
  (void)state;
  int checked = 0;
  for (int i = 0; i < nlayers; i++) {
    for (int h = 0; h < nheaders; h++) {
      char key[sizeof headers[0] + 8], path[sizeof headers[0] + 16];
      snprintf(key, sizeof key, ",%.63s,", headers[h]);
      if (strstr(headers[h], ".h"))
        snprintf(path, sizeof path, "%.63s", headers[h]);
      else
        snprintf(path, sizeof path, "giant/%.63s.h", headers[h]);
      bool allowed = strstr(layers[i].allowed, key) != NULL;
      run_result r;
      int rc = try_include(&layers[i], path, &r);
      if (allowed && rc != 0)
        run_fail(&r, "layer %s may use %s, but it does not compile there, its output above", layers[i].name, path);
      if (!allowed && (rc == 0 || !strstr(r.output, "No such file")))
        run_fail(&r, "layer %s must not see %s (a higher layer's header), but %s, its output above", layers[i].name,
                 path, rc == 0 ? "it compiles" : "it fails for another reason");
      checked++;
    }
  }
  assert_int_equal(checked, nlayers * nheaders);
}

/* The first header found under dir (depth first), as a path relative to
 * the source root, or false when the folder has none. */
static bool find_internal(const char *rel, char *out, size_t n) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/%s", source_dir, rel);
  DIR *d = opendir(dir);
  if (!d) return false;
  struct dirent *e;
  bool found = false;
  while (!found && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    size_t len = strlen(e->d_name);
    char sub[512];
    snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
    char key[520];
    snprintf(key, sizeof key, ",%s,", sub);
    if (len > 2 && !strcmp(e->d_name + len - 2, ".h")) {
      if (strstr(shared, key)) continue; /* the layers above may include it */
      snprintf(out, n, "%s", sub);
      found = true;
    } else if (e->d_type == DT_DIR) {
      found = find_internal(sub, out, n);
    }
  }
  closedir(d);
  return found;
}

static void internal_headers(void **state) {
  (void)state;
  int probes = 0;
  for (int j = 0; j < nlayers; j++) {
    char internal[512];
    if (!find_internal(layers[j].name, internal, sizeof internal)) continue;
    /* (Its own layer includes it already: the build shows that.) */
    for (int i = 0; i < nlayers; i++) {
      if (i == j) continue;
      run_result r;
      int rc = try_include(&layers[i], internal, &r);
      if (rc == 0 || !strstr(r.output, "No such file"))
        run_fail(&r, "layer %s reaches into layer %s's internal %s, its output above", layers[i].name, layers[j].name,
                 internal);
      probes++;
    }
  }
  /* core and comm have internal headers in every build (resilience and
   * launch too, when built with etcd). */
  assert_true(probes >= 2 * (nlayers - 1));
}

/* The public headers of include/<sub> as names ("engine/comm"). */
static void list_folder(const char *sub, const char *prefix) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/include/%s", source_dir, sub);
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "test_layers: cannot open %s\n", dir);
    exit(2);
  }
  struct dirent *e;
  while ((e = readdir(d)) && nheaders < MAX_HEADERS) {
    size_t len = strlen(e->d_name);
    /* giant.h and engine.h are the umbrellas over every layer, in none of them. */
    if (len < 3 || strcmp(e->d_name + len - 2, ".h") || !strcmp(e->d_name, "giant.h") || !strcmp(e->d_name, "engine.h"))
      continue;
    snprintf(headers[nheaders++], sizeof headers[0], "%s%.*s", prefix, (int)(len - 2), e->d_name);
  }
  closedir(d);
}

static void list_headers(void) {
  list_folder("giant", "");
  list_folder("giant/engine", "engine/");
  /* The shared internal headers are checked like the public ones. */
  char copy[sizeof shared];
  snprintf(copy, sizeof copy, "%s", shared);
  for (char *save = NULL, *p = strtok_r(copy, ",", &save); p && nheaders < MAX_HEADERS; p = strtok_r(NULL, ",", &save))
    snprintf(headers[nheaders++], sizeof headers[0], "%.63s", p);
}

int main(int argc, char **argv) {
  if (argc < 6 || strncmp(argv[4], "shared=", 7)) {
    fprintf(stderr, "usage: test_layers CC LAYERS_DIR SOURCE_DIR shared=p1,p2,... layer=h1,h2,...\n");
    return 2;
  }
  cc = argv[1];
  layers_dir = argv[2];
  source_dir = argv[3];
  snprintf(shared, sizeof shared, ",%s,", argv[4] + 7);
  for (int i = 5; i < argc && nlayers < MAX_LAYERS; i++) {
    const char *eq = strchr(argv[i], '=');
    if (!eq) {
      fprintf(stderr, "test_layers: '%s' is not layer=headers\n", argv[i]);
      return 2;
    }
    layer *l = &layers[nlayers++];
    snprintf(l->name, sizeof l->name, "%.*s", (int)(eq - argv[i]), argv[i]);
    snprintf(l->allowed, sizeof l->allowed, ",%s,", eq + 1);
  }
  list_headers();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(public_headers),
      cmocka_unit_test(internal_headers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
