#!/usr/bin/env bash
# Idempotent set-up of .venv/ with everything the tests and local runs need.
# A second run on a ready machine takes a few seconds: each step checks before it works.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PY=$VENV/bin/python
step() { printf '[setup] %s\n' "$*"; }

# 1. MPI for Horovod (the SageMaker container launches Horovod through mpirun; the TF 2.12 runtime builds against it).
if ! command -v mpirun >/dev/null 2>&1 || ! command -v mpicxx >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "installing Open MPI (Debian packages)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
  else
    step "Open MPI missing and apt-get unavailable: Horovod will be built with gloo only"
  fi
fi

# 1b. A JDK for local Spark (`dfm data prepare --local`; pyspark bundles Spark's jars but not Java).
if ! command -v java >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "installing a JDK for local Spark (Debian's openjdk-17-jre-headless)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    step "Java missing and apt-get unavailable: dfm data prepare --local will not run"
  fi
fi

# 2. The project's virtual environment: the launcher, and the TF 2.14.1 runtime (the TF 2.13/2.14 images) on Python 3.11.
if [ ! -x "$PY" ]; then
  PYTHON=$(command -v python3.11 || command -v python3)
  step "creating $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
  "$PY" -m pip install -q --upgrade pip wheel
fi

# 3. dfm itself (editable) with the local-run and test extras; pip's cache makes repeats cheap.
stamp=$VENV/.dfm-installed
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ setup.py -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  step "installing dfm[local,tune,spark,test] into $VENV"
  "$PY" -m pip install -q -e '.[local,tune,spark,test]' cloudpickle packaging wheel
  touch "$stamp"
fi

# 3b. google-crc32c's wheel for the Python of SageMaker's Spark 3.5 image (3.12), which `dfm data prepare` ships to
#     the processing job so its TFRecord framing uses the C extension (the image has no CRC32C; without the wheel
#     the shipped pure-Python fallback works, slower).
SPARK_WHEELS=$HOME/.cache/dfm/wheels/spark
if ! ls "$SPARK_WHEELS"/google_crc32c-*-cp312-*.whl >/dev/null 2>&1; then
  step "fetching google-crc32c for the Spark image's Python 3.12 into $SPARK_WHEELS"
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
      --platform manylinux2014_x86_64 -d "$SPARK_WHEELS" "google-crc32c>=1.5" \
    || step "could not fetch it: prepare jobs will use google-crc32c's pure-Python fallback"
fi

# 4. PipeModeDataset (sagemaker-tensorflow): cp310 wheels only; its op does not link Python, so the
#    cp310 wheel unpacked into a folder on a .pth path works on 3.11 (see shared NOTES).
SMTF_DIR=$VENV/sagemaker-tensorflow
if ! "$PY" -c "import sagemaker_tensorflow" >/dev/null 2>&1; then
  step "installing sagemaker-tensorflow (PipeModeDataset) into $SMTF_DIR"
  "$PY" -m pip install -q --no-deps --upgrade --only-binary=:all: --python-version 3.10 --implementation cp \
      --abi cp310 --platform manylinux1_x86_64 --target "$SMTF_DIR" "sagemaker-tensorflow==2.14.*"
  site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$(cd "$SMTF_DIR" && pwd)" > "$site/sagemaker_tensorflow_cp310.pth"
fi

# 5. The SageMaker toolkits themselves, set aside (not on the venv's path: their pins would downgrade numpy
#    and protobuf), at the versions the images pin (scripts/sagemaker-toolkits.txt). The --local fidelity tests
#    compare our container layout against their own functions. Re-installed when the versions do not match.
TOOLKITS=$VENV/sagemaker-toolkits
if ! "$PY" - "$TOOLKITS" scripts/sagemaker-toolkits.txt <<'PYCHECK' >/dev/null 2>&1
import importlib.metadata, sys
from packaging.requirements import Requirement
folder, pins = sys.argv[1], sys.argv[2]
found = {d.metadata["Name"].lower().replace("_", "-"): d.version for d in importlib.metadata.distributions(path=[folder])}
for line in open(pins):
    line = line.split("#", 1)[0].strip()
    if line:
        req = Requirement(line)
        assert req.specifier.contains(found[req.name], prereleases=True), (req, found.get(req.name))
PYCHECK
then
  step "installing the SageMaker training toolkits aside into $TOOLKITS (for the fidelity tests)"
  rm -rf "$TOOLKITS"
  "$PY" -m pip install -q --no-deps --target "$TOOLKITS" -r scripts/sagemaker-toolkits.txt
fi
# 6. The runtimes of the other image families (TF 2.12 + Horovod on Python 3.10; TF 2.21 on Python 3.12):
#    the version matrix of `make test` and `dfm launch --local` for specs naming those images use them.
for runtime in tf-2.12 tf-2.21; do bash scripts/runtime.sh "$runtime"; done
step "ready: $VENV ($("$PY" -c 'import tensorflow as tf; print("TF", tf.__version__)' 2>/dev/null))"
