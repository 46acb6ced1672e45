"""Reads Giant's TensorBoard event files with TensorBoard's own reader
(EventAccumulator) and checks them against the run's metrics file.

  tboard_check.py scalars DIR METRICS   every scalar at every step
  tboard_check.py text DIR TAG STEP WANT  a text summary, as the text plugin reads it
  tboard_check.py cut DIR METRICS        the file cut anywhere in its last
                                         records still reads, whole records only

Exits 0 when the files agree, 1 with what differs."""
import glob
import json
import os
import shutil
import struct
import sys
import tempfile

from tensorboard.backend.event_processing import event_accumulator as ea

# The metrics line's field, the event file's tag, the scale between them,
# and the precision the metrics line prints it to.
FIELDS = [
    ("loss", "train/loss", 1.0, 1e-6),
    ("lr", "train/lr", 1.0, 0.0),
    ("grad_norm", "train/grad_norm", 1.0, 1e-6),
    ("tokens_per_s", "perf/tokens_per_s", 1.0, 0.05),
    ("mfu", "perf/mfu", 1.0, 5e-5),
    ("step_time_s", "perf/step_time_s", 1.0, 1e-6),
    ("mem_peak_bytes", "memory/peak_mib", 1.0 / (1 << 20), 0.0),
    ("eta_s", "progress/eta_s", 1.0, 5e-4),
]


def fail(msg):
    print("tboard_check: " + msg)
    sys.exit(1)


def load(d):
    acc = ea.EventAccumulator(d, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    return acc


def event_file(d):
    files = glob.glob(os.path.join(d, "events.out.tfevents.*"))
    if len(files) != 1:
        fail("want one event file in %s, found %s" % (d, files))
    name = os.path.basename(files[0]).split(".")
    # events.out.tfevents.<time>.<host>.<pid>
    if len(name) < 6 or not name[3].isdigit() or name[-1] != str(int(name[-1])):
        fail("event file name %s is not events.out.tfevents.<time>.<host>.<pid>" % files[0])
    return files[0]


def metrics(path):
    with open(path) as f:
        return [json.loads(l) for l in f if '"loss"' in l]


def close(a, b, prec):
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b)) + prec


def check_scalars(acc, lines, allow_missing_last=False):
    tags = acc.Tags()["scalars"]
    for _, tag, _, _ in FIELDS:
        if tag not in tags:
            fail("no scalar %s (tags: %s)" % (tag, tags))
    want_steps = [l["step"] for l in lines]
    for field, tag, scale, prec in FIELDS:
        got = {e.step: e.value for e in acc.Scalars(tag)}
        steps = sorted(got)
        want = want_steps[:-1] if allow_missing_last and steps == want_steps[:-1] else want_steps
        if steps != want:
            fail("%s: steps %s, the metrics file has %s" % (tag, steps, want_steps))
        for l in lines:
            if l["step"] not in got:
                continue
            w = l[field] * scale
            if not close(got[l["step"]], w, prec * scale + abs(w) * 1e-6):
                fail("%s at step %d: %r, the metrics file says %r" % (tag, l["step"], got[l["step"]], w))
    evals = [l for l in lines if "eval_loss" in l]
    if evals:
        got = {e.step: e.value for e in acc.Scalars("eval/loss")} if "eval/loss" in tags else {}
        if sorted(got) != [l["step"] for l in evals]:
            fail("eval/loss: steps %s, the metrics file has %s" % (sorted(got), [l["step"] for l in evals]))
        for l in evals:
            if not close(got[l["step"]], l["eval_loss"], 1e-6):
                fail("eval/loss at step %d: %r, the metrics file says %r" % (l["step"], got[l["step"]], l["eval_loss"]))
    return len(acc.Scalars("train/loss"))


def cmd_scalars(d, mpath):
    event_file(d)
    acc = load(d)
    if acc.file_version != 2.0:
        fail("file_version %r, want 2 (brain.Event:2)" % acc.file_version)
    lines = metrics(mpath)
    n = check_scalars(acc, lines)
    print("tboard_check: %d steps, %d scalars each, and %d validation losses agree with %s" %
          (n, len(FIELDS), sum("eval_loss" in l for l in lines), mpath))


def cmd_text(d, tag, step, want):
    acc = load(d)
    if tag not in acc.Tags()["tensors"]:
        fail("no text summary %s (tensors: %s)" % (tag, acc.Tags()["tensors"]))
    meta = acc.SummaryMetadata(tag)
    if meta.plugin_data.plugin_name != "text":
        fail("%s: plugin %r, want text" % (tag, meta.plugin_data.plugin_name))
    from tensorboard.util import tensor_util

    for e in acc.Tensors(tag):
        text = tensor_util.make_ndarray(e.tensor_proto).item().decode()
        if e.step == int(step) and want in text:
            print("tboard_check: %s at step %d: %s" % (tag, e.step, text))
            return
    fail("%s: no text holding %r at step %s in %s" % (tag, want, step,
         [(e.step, tensor_util.make_ndarray(e.tensor_proto).item()) for e in acc.Tensors(tag)]))


def records(path):
    """Each whole record's end and whether it holds a step's train/loss."""
    from tensorboard.compat.proto import event_pb2

    with open(path, "rb") as f:
        data = f.read()
    ends, losses, off = [], [], 0
    while off + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[off:off + 8])
        if off + 16 + n > len(data):
            break
        e = event_pb2.Event.FromString(data[off + 12:off + 12 + n])
        off += 16 + n
        ends.append(off)
        losses.append(any(v.tag == "train/loss" for v in e.summary.value))
    if off != len(data):
        fail("%s: %d bytes after the last whole record at %d" % (path, len(data) - off, off))
    return data, ends, losses


def cmd_cut(d, mpath):
    path = event_file(d)
    lines = metrics(mpath)
    acc = load(d)
    # A killed run's last step may have its metrics line and not its event.
    n = check_scalars(acc, lines, allow_missing_last=True)
    data, ends, losses = records(path)
    tmp = tempfile.mkdtemp(prefix="giant-tbcut-")
    try:
        cut_file = os.path.join(tmp, os.path.basename(path))
        # Every cut inside the last three records, and at each record's end.
        first = ends[-4] if len(ends) >= 4 else 0
        cuts = sorted(set(range(first, len(data) + 1)) | set(ends))
        for cut in cuts:
            with open(cut_file, "wb") as f:
                f.write(data[:cut])
            want = sum(1 for e, l in zip(ends, losses) if e <= cut and l)
            a = load(tmp)
            got = len(a.Scalars("train/loss")) if "train/loss" in a.Tags()["scalars"] else 0
            if got != want:
                fail("cut at %d of %d bytes: %d steps read, %d whole before the cut" % (cut, len(data), got, want))
    finally:
        shutil.rmtree(tmp)
    print("tboard_check: %d steps read; %d cuts of the file each read cleanly up to the cut" % (n, len(cuts)))


def main(argv):
    if len(argv) >= 4 and argv[1] == "scalars":
        cmd_scalars(argv[2], argv[3])
    elif len(argv) >= 6 and argv[1] == "text":
        cmd_text(argv[2], argv[3], argv[4], argv[5])
    elif len(argv) >= 4 and argv[1] == "cut":
        cmd_cut(argv[2], argv[3])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
