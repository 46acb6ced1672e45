/* The CPU's model and kernel-relevant flags from /proc/cpuinfo (bench_cpu.h). */
#include "bench_cpu.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The flags that decide which kernel level a CPU can run. */
static const char *const isa_flags[] = {"avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_tile", "amx_bf16"};

static bool has_flag(const char *flags, const char *name) {
  size_t n = strlen(name);
  for (const char *p = strstr(flags, name); p; p = strstr(p + 1, name))
    if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0')) return true;
  return false;
}

void bench_cpu_features(char *out, size_t cap) {
  char model[128] = "unknown", line[4096];
  char flags[4096] = "";
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (!colon) continue;
    if (!strncmp(line, "model name", 10) && !strcmp(model, "unknown")) {
      snprintf(model, sizeof model, "%s", colon + 2);
      model[strcspn(model, "\n")] = '\0';
    } else if (!strncmp(line, "flags", 5) && !flags[0]) {
      snprintf(flags, sizeof flags, "%s", colon + 1);
    }
  }
  if (f) fclose(f);
  for (char *p = model; *p; p++)
    if (*p == ' ' || *p == '=') *p = '_';
  size_t len = (size_t)snprintf(out, cap, "%s/", model);
  bool first = true;
  for (size_t i = 0; i < sizeof isa_flags / sizeof isa_flags[0] && len < cap; i++) {
    if (!has_flag(flags, isa_flags[i])) continue;
    len += (size_t)snprintf(out + len, cap - len, "%s%s", first ? "" : ",", isa_flags[i]);
    first = false;
  }
  if (first && len < cap) snprintf(out + len, cap - len, "none");
}
