# Installs the Debian packages Giant needs, when any is missing.
# Sourced by the quick-start scripts and by .ci/run.
# gnuplot-nox: giant-plot draws with it (its tests skip without it).
GIANT_PACKAGES="build-essential cmake pkg-config libopenblas-openmp-dev libcmocka-dev fortunes \
libgrpc-dev libprotobuf-c-dev protobuf-c-compiler etcd-server etcd-client libssl-dev openssl iproute2 \
procps util-linux gnuplot-nox"

# giant_install_deps [PACKAGES]: installs those missing of PACKAGES (default:
# GIANT_PACKAGES).
giant_install_deps() {
  local missing=""
  for p in ${1:-$GIANT_PACKAGES}; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  echo "installing:$missing"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q $missing
}

# Python packages the tests use as independent references (test_bpe:
# Hugging Face's tokenizers; test_tboard: TensorBoard's event reader, with
# the numpy 1.x it was built against; test_interop: transformers'
# GPT2LMHeadModel, read and written through safetensors, on Debian's
# PyTorch 1.13), pinned; pip installs them for the python3 on PATH, the one
# CMake finds for the tests. Debian's python3 marks itself externally
# managed: --break-system-packages lets pip add to it all the same (these
# are wheels of their own, not Debian's). transformers 4.36.2 takes both
# tokenizers 0.15 and Debian's PyTorch 1.13 (4.30 would want tokenizers
# below 0.14).
GIANT_PY_PACKAGES="tokenizers==0.15.2 tensorboard==2.15.2 numpy==1.26.4 transformers==4.36.2 safetensors==0.4.1"
GIANT_PY_DEBIAN_PACKAGES="python3-torch"

# giant_install_py_deps: installs those of GIANT_PY_PACKAGES missing (with
# pip, and pip itself from Debian if python3 lacks it). Where the package
# index cannot be reached it warns and goes on: the tests that compare
# against those packages then skip (and CI, which must run them, fails on
# the skip).
giant_install_py_deps() {
  giant_install_deps "$GIANT_PY_DEBIAN_PACKAGES" ||
    echo "warning: could not install $GIANT_PY_DEBIAN_PACKAGES: the tests that compare against it will skip" >&2
  local missing=""
  for p in $GIANT_PY_PACKAGES; do
    python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('${p%%==*}') != '${p#*==}')" 2>/dev/null ||
      missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  python3 -m pip --version >/dev/null 2>&1 || giant_install_deps "python3-pip"
  echo "installing (pip):$missing"
  python3 -m pip install -q --break-system-packages $missing ||
    echo "warning: could not install$missing with pip: the tests that compare against them will skip" >&2
}

# For the Slurm test (tests/launch/test_launch_slurm.c) and
# tools/slurm_cluster.sh, which runs a Slurm cluster on emulated nodes.
GIANT_SLURM_PACKAGES="slurmctld slurmd slurm-client munge"

# For the benchmarks' peers alone (the build and the tests need none of
# them): PyTorch (Debian's, for the system python3) and OpenMPI, whose
# MPI_Allreduce bench_comm runs beside Giant's shared memory.
GIANT_BENCH_PACKAGES="python3-torch libopenmpi-dev openmpi-bin"

giant_install_bench_deps() {
  giant_install_deps "$GIANT_BENCH_PACKAGES"
}

# For tools/format.sh (and CI's style check): the clang-format whose output
# .clang-format is checked against.
GIANT_STYLE_PACKAGES="clang-format-14"

# For tests/fuzz/fuzz.sh alone (the normal build needs none of them): clang with
# libFuzzer and the sanitizers' runtimes, and the OpenMP runtime clang links.
GIANT_FUZZ_PACKAGES="clang libclang-rt-dev libomp-dev"

giant_install_fuzz_deps() {
  giant_install_deps "$GIANT_FUZZ_PACKAGES"
}

# giant_build DIR [cmake options...]: configure and build into DIR; only
# the target GIANT_BUILD_TARGET when set (tests-core: the core tests and
# what they run).
giant_build() {
  local dir="$1"
  shift
  mkdir -p "$dir"
  cmake -S "$GIANT_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; return 1; }
  cmake --build "$dir" -j"$(nproc)" ${GIANT_BUILD_TARGET:+--target "$GIANT_BUILD_TARGET"}
}
