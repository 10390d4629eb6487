#!/usr/bin/env bash
# Build (once) a training runtime: a virtual environment holding the TensorFlow, Python and Horovod of one
# SageMaker TensorFlow image family, so the bundled scripts are proven on what that image really runs.
#   scripts/runtime.sh tf-2.12    # TF 2.12.0, Python 3.10, Horovod, PipeModeDataset 2.12
#   scripts/runtime.sh tf-2.21    # TF 2.21.0, Python 3.12 (Keras 3), no Horovod, no PipeModeDataset
# Runtimes live in $DFM_RUNTIMES (default ~/.cache/dfm/runtimes), where `dfm launch --local` looks for them,
# so a fresh clone on the same machine reuses them. A runtime is rebuilt only when its requirements change.
# (TF 2.14.1 is the project's own .venv, built by scripts/setup.sh.)
set -euo pipefail
cd "$(dirname "$0")/.."

name=${1:?usage: scripts/runtime.sh tf-2.12|tf-2.21}
ROOT="${DFM_RUNTIMES:-$HOME/.cache/dfm/runtimes}"
WHEELS="${DFM_WHEEL_CACHE:-$HOME/.cache/dfm/wheels}"
TEST_REQS="pytest>=8 pytest-timeout>=2.3 psutil>=5.9"
horovod=""
case "$name" in
  tf-2.12)
    python=3.10
    reqs='tensorflow-cpu==2.12.0 sagemaker-tensorflow==2.12.0.1.18.1 mpi4py>=4,<5 cloudpickle packaging pyyaml'
    # The image has Horovod 0.27.0, whose bundled gloo no longer compiles with gcc 12 and current kernel
    # headers (a flexible array member in linux.cc); 0.28.1 has the fix and the same TensorFlow API.
    horovod=0.28.1 ;;
  tf-2.21)
    python=3.12
    reqs="tensorflow-cpu==2.21.0" ;;
  *) echo "runtime.sh: unknown runtime '$name' (tf-2.12, tf-2.21)" >&2; exit 2 ;;
esac
want="python=$python $reqs $TEST_REQS horovod=$horovod"
dir="$ROOT/$name"
step() { printf '[runtime %s] %s\n' "$name" "$*"; }

if [ -f "$dir/.requirements" ] && [ "$(cat "$dir/.requirements")" = "$want" ] && [ -x "$dir/bin/python" ]; then
  step "ready: $dir"
  exit 0
fi

find_python() {  # python3.X on PATH, else pyenv's build of it
  local exe
  for exe in "$(command -v "python$1" 2>/dev/null)" "$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python"$1" 2>/dev/null | sort -V | tail -n 1)"; do
    [ -n "$exe" ] && "$exe" -c 'import venv' >/dev/null 2>&1 && { echo "$exe"; return 0; }
  done
  echo "runtime.sh: Python $1 not found (install it, e.g. with pyenv)" >&2
  return 1
}

rm -rf "$dir"
mkdir -p "$ROOT" "$WHEELS"
step "creating $dir with Python $python"
"$(find_python "$python")" -m venv "$dir"
"$dir/bin/python" -m pip install -q --upgrade pip wheel setuptools
step "installing $reqs"
# shellcheck disable=SC2086
"$dir/bin/python" -m pip install -q $reqs $TEST_REQS

if [ -n "$horovod" ]; then
  wheel=$(ls "$WHEELS/$name"/horovod-"$horovod"-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    step "building Horovod $horovod against this TensorFlow (several minutes, once per machine)"
    with_mpi=0; command -v mpicxx >/dev/null 2>&1 && with_mpi=1
    mkdir -p "$WHEELS/$name"
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=$with_mpi \
    HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS=-j"$(nproc)" \
      "$dir/bin/python" -m pip wheel -q --no-build-isolation --no-deps -w "$WHEELS/$name" "horovod==$horovod"
    wheel=$(ls "$WHEELS/$name"/horovod-"$horovod"-*.whl | head -n 1)
  fi
  "$dir/bin/python" -m pip install -q --no-deps "$wheel"
fi
echo "$want" > "$dir/.requirements"
step "ready: $dir ($("$dir/bin/python" -c 'import tensorflow as tf; print("TF", tf.__version__)' 2>/dev/null))"
