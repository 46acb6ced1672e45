/* TensorBoard's Event and Summary messages, packed by protobuf-c from the
 * subset of TensorFlow's definitions in proto/, into TFRecord records. */
#include "tboard.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "event.pb-c.h"
#include "tfrecord.h"

struct run_tboard {
  int fd;
  char path[4096];
};

static double unix_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* mkdir -p: the runs of a job often share a parent made by none of them. */
static gt_status make_dirs(const char *dir) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return gt_errorf(GT_EINVAL, "--tensorboard: path too long");
  for (char *c = p + 1;; c++) {
    bool end = *c == '\0';
    if (*c == '/' || end) {
      *c = '\0';
      if (mkdir(p, 0777) != 0 && errno != EEXIST)
        return gt_errorf(GT_EIO, "--tensorboard: cannot make directory %s: %s", p, strerror(errno));
      if (end) break;
      *c = '/';
    }
  }
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return gt_errorf(GT_EINVAL, "--tensorboard %s: not a directory", dir);
  return GT_OK;
}

/* Packs e and appends it as one record. */
static gt_status write_event(run_tboard *tb, const Tensorflow__Event *e) {
  size_t n = tensorflow__event__get_packed_size(e);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return gt_errorf(GT_ENOMEM, "out of memory packing an event");
  tensorflow__event__pack(e, buf);
  gt_status s = run_tfrecord_append(tb->fd, buf, n);
  free(buf);
  if (s != GT_OK) return gt_error_context(s, "%s", tb->path);
  return GT_OK;
}

gt_status run_tboard_open(const char *dir, run_tboard **out) {
  *out = NULL;
  GT_TRY(make_dirs(dir));
  run_tboard *tb = calloc(1, sizeof *tb);
  if (!tb) return gt_errorf(GT_ENOMEM, "out of memory opening an event file");
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  /* A second file from the same process in the same second (a test's runs)
   * gets a suffix rather than sharing the first. */
  long long now = (long long)time(NULL);
  tb->fd = -1;
  for (int k = 0; k < 100 && tb->fd < 0; k++) {
    char suffix[16] = "";
    if (k) snprintf(suffix, sizeof suffix, ".%d", k);
    int len = snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s.%d%s", dir, now, host,
                       (int)getpid(), suffix);
    if (len >= (int)sizeof tb->path) {
      free(tb);
      return gt_errorf(GT_EINVAL, "--tensorboard %s: path too long", dir);
    }
    tb->fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (tb->fd < 0 && errno != EEXIST) break;
  }
  if (tb->fd < 0) {
    gt_status s = gt_errorf(GT_EIO, "--tensorboard: cannot create %s: %s", tb->path, strerror(errno));
    free(tb);
    return s;
  }
  Tensorflow__Event e = TENSORFLOW__EVENT__INIT;
  e.wall_time = unix_now();
  e.what_case = TENSORFLOW__EVENT__WHAT_FILE_VERSION;
  e.file_version = "brain.Event:2";
  gt_status s = write_event(tb, &e);
  if (s != GT_OK) {
    run_tboard_close(tb);
    return s;
  }
  *out = tb;
  return GT_OK;
}

void run_tboard_close(run_tboard *tb) {
  if (!tb) return;
  if (tb->fd >= 0) close(tb->fd);
  free(tb);
}

const char *run_tboard_path(const run_tboard *tb) { return tb ? tb->path : ""; }

gt_status run_tboard_scalars(run_tboard *tb, int64_t step, const run_tboard_scalar *v, int n) {
  if (!tb || n <= 0) return GT_OK;
  Tensorflow__Summary__Value *vals = calloc((size_t)n, sizeof *vals);
  Tensorflow__Summary__Value **ptrs = calloc((size_t)n, sizeof *ptrs);
  if (!vals || !ptrs) {
    free(vals);
    free(ptrs);
    return gt_errorf(GT_ENOMEM, "out of memory writing scalars");
  }
  for (int i = 0; i < n; i++) {
    tensorflow__summary__value__init(&vals[i]);
    vals[i].tag = (char *)v[i].tag;
    vals[i].value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    vals[i].simple_value = v[i].value;
    ptrs[i] = &vals[i];
  }
  Tensorflow__Summary sum = TENSORFLOW__SUMMARY__INIT;
  sum.n_value = (size_t)n;
  sum.value = ptrs;
  Tensorflow__Event e = TENSORFLOW__EVENT__INIT;
  e.wall_time = unix_now();
  e.step = step;
  e.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
  e.summary = &sum;
  gt_status s = write_event(tb, &e);
  free(vals);
  free(ptrs);
  return s;
}

gt_status run_tboard_text(run_tboard *tb, int64_t step, const char *tag, const char *text) {
  if (!tb) return GT_OK;
  /* The text plugin's form: a scalar DT_STRING tensor whose metadata names
   * the plugin (a simple_value-less value TensorBoard would not show). */
  Tensorflow__SummaryMetadata__PluginData plugin = TENSORFLOW__SUMMARY_METADATA__PLUGIN_DATA__INIT;
  plugin.plugin_name = "text";
  Tensorflow__SummaryMetadata meta = TENSORFLOW__SUMMARY_METADATA__INIT;
  meta.plugin_data = &plugin;
  meta.data_class = TENSORFLOW__DATA_CLASS__DATA_CLASS_TENSOR;
  Tensorflow__TensorShapeProto shape = TENSORFLOW__TENSOR_SHAPE_PROTO__INIT;
  ProtobufCBinaryData str = {.len = strlen(text), .data = (uint8_t *)text};
  Tensorflow__TensorProto tensor = TENSORFLOW__TENSOR_PROTO__INIT;
  tensor.dtype = TENSORFLOW__DATA_TYPE__DT_STRING;
  tensor.tensor_shape = &shape;
  tensor.n_string_val = 1;
  tensor.string_val = &str;
  Tensorflow__Summary__Value val = TENSORFLOW__SUMMARY__VALUE__INIT;
  val.tag = (char *)tag;
  val.metadata = &meta;
  val.value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_TENSOR;
  val.tensor = &tensor;
  Tensorflow__Summary__Value *ptr = &val;
  Tensorflow__Summary sum = TENSORFLOW__SUMMARY__INIT;
  sum.n_value = 1;
  sum.value = &ptr;
  Tensorflow__Event e = TENSORFLOW__EVENT__INIT;
  e.wall_time = unix_now();
  e.step = step;
  e.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
  e.summary = &sum;
  return write_event(tb, &e);
}
