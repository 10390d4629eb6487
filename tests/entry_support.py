"""Test helpers for the bundled entry points: import them as the container does (flat, from their own
folder), lay out a fake SageMaker container tree, write small datasets, run scripts as processes.

The entry-point tests run under each TensorFlow runtime's own pytest (TF, numpy, pytest, psutil, and
Horovod / sagemaker-tensorflow where that image family has them; no dfm dependencies). From launcher/
they use only numpy-and-TensorFlow modules (launcher.data.synth and its TFRecord writer, launcher.facts.contract,
launcher.local.cluster's free_port).
"""

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENTRYPOINTS = REPO / "entrypoints"
PYTHON = sys.executable

for _folder in (ENTRYPOINTS, REPO):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

# The launcher's, so that a test process walks the ports once whoever asks (a second copy of the walk,
# such as the flat `hetero_cluster` one, would hand out the same unbound ports again).
from launcher.local.cluster import free_port  # noqa: E402,F401

# What some tests need beyond TensorFlow: the module that provides it, and the runtimes that have it.
FEATURES = {
    "horovod": (
        "horovod",
        "Horovod is in SageMaker's TensorFlow images up to 2.12: the tf-2.12 runtime "
        "(~/.cache/dfm/runtimes/tf-2.12, made by make setup) runs this test",
    ),
    "pipe": (
        "sagemaker_tensorflow",
        "PipeModeDataset (sagemaker-tensorflow) is in SageMaker's TensorFlow images "
        "up to 2.14: the tf-2.12 runtime and the project venv (TF 2.14) run this test",
    ),
}
EXPECT_ENV = "DFM_EXPECT"  # e.g. "horovod,pipe": in this runtime those tests must run, not skip


def entrypoint_module(name):
    """An entry-point module imported as the container imports it: flat, its folder on sys.path for its siblings."""
    return importlib.import_module(name)


def feed_fifo(path, payload):
    """mkfifo `path` and write `payload` into it from a thread (the write blocks until a reader opens it)."""
    os.mkfifo(path)

    def write():
        with open(path, "wb") as fifo:
            fifo.write(payload)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def have(feature):
    return importlib.util.find_spec(FEATURES[feature][0]) is not None


def require(feature):
    """Skip the calling test when this runtime lacks `feature`, naming the runtime that has it; fail
    instead when $DFM_EXPECT lists the feature (the runtime of an image family that has it)."""
    module, where = FEATURES[feature]
    if have(feature):
        return
    expected = {name.strip() for name in os.environ.get(EXPECT_ENV, "").split(",") if name.strip()}
    unknown = expected - set(FEATURES)
    if unknown:
        pytest.fail(f"{EXPECT_ENV} names unknown features {sorted(unknown)}; known: {sorted(FEATURES)}")
    import tensorflow as tf

    message = f"no {module} in this runtime ({sys.executable}, TF {tf.__version__}). {where}"
    if feature in expected:
        pytest.fail(f"{EXPECT_ENV} says this runtime has {feature}, but: {message}")
    pytest.skip(message)


def ephemeral_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        return tuple(map(int, f.read().split()))


def assert_free_and_not_ephemeral(ports):
    """`ports` are distinct, outside the kernel's ephemeral range and bindable on every interface (as
    TensorFlow's server binds them)."""
    low, high = ephemeral_range()
    assert len(set(ports)) == len(ports), ports
    assert not [p for p in ports if low <= p <= high], f"ephemeral ({low}-{high}): {ports}"
    for port in ports:
        with socket.socket() as s:
            s.bind(("", port))


def make_container(
    base,
    channels,
    hosts=("algo-1",),
    current_host=None,
    hyperparameters=None,
    input_mode="File",
    s3_sharded=(),
    num_cpus=2,
):
    """Lay out <base> like /opt/ml and return the environment a script sees there.

    channels: channel names; each gets input/data/<name>/ (File) and an inputdataconfig entry.
    s3_sharded: names whose S3DistributionType is ShardedByS3Key."""
    base = Path(base)
    hosts = list(hosts)
    current_host = current_host or hosts[0]
    config = base / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    for sub in ("model", "output/data", "checkpoints", "code", "input/data"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    input_config = {}
    for name in channels:
        input_config[name] = {
            "TrainingInputMode": input_mode,
            "RecordWrapperType": "None",
            "S3DistributionType": "ShardedByS3Key" if name in s3_sharded else "FullyReplicated",
        }
        if input_mode != "Pipe":
            (base / "input" / "data" / name).mkdir(parents=True, exist_ok=True)
    hps = dict(hyperparameters or {})
    (config / "inputdataconfig.json").write_text(json.dumps(input_config))
    (config / "hyperparameters.json").write_text(json.dumps({k: json.dumps(v) for k, v in hps.items()}))
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": current_host, "hosts": hosts}))
    for script in ENTRYPOINTS.glob("*.py"):
        shutil.copy(script, base / "code" / script.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SM_") and k != "TF_CONFIG"}
    env.update(
        {
            "SAGEMAKER_BASE_DIR": str(base),
            "SM_HOSTS": json.dumps(hosts),
            "SM_CURRENT_HOST": current_host,
            "SM_CHANNELS": json.dumps(sorted(channels)),
            "SM_HPS": json.dumps(hps),
            "SM_MODEL_DIR": str(base / "model"),
            "SM_OUTPUT_DATA_DIR": str(base / "output" / "data"),
            "SM_NUM_CPUS": str(num_cpus),
            "SM_NUM_GPUS": "0",
            "SM_INPUT_DIR": str(base / "input"),
            "SM_INPUT_CONFIG_DIR": str(config),
            "SM_OUTPUT_DIR": str(base / "output"),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "CUDA_VISIBLE_DEVICES": "",
        }
    )
    for name in channels:
        env[f"SM_CHANNEL_{name.upper().replace('-', '_')}"] = str(base / "input" / "data" / name)
    return env


def argv_for(hyperparameters):
    """Render hyperparameters as the toolkit does: `--key value`, values JSON-encoded, strings bare."""
    argv = []
    for key, value in hyperparameters.items():
        argv += [f"--{key}", value if isinstance(value, str) else json.dumps(value)]
    return argv


# Stand-ins for a host's GPUs: the CPU split into N logical devices, and MultiWorkerMirroredStrategy told
# to place one replica on each (it takes only GPUs, or one CPU; the hook is TensorFlow-internal and
# test-only). The script then runs unchanged, as __main__.
_LOCAL_CPU_REPLICAS = """
import os, runpy, sys
import tensorflow as tf
from tensorflow.python.distribute import collective_all_reduce_strategy as cars

count = int(sys.argv[1])
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)

def cpu_replicas(self, cluster_resolver, worker_device):
    return tuple(f"{worker_device}/device:CPU:{i}" for i in range(count)), "CPU"

cars.CollectiveAllReduceExtended._initialize_local_devices = cpu_replicas
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


# A ParameterServerStrategy that believes each worker task has {count} GPUs (its discovery counts the
# workers' remote GPU devices; test-only, TensorFlow-internal), then the script as __main__.
FAKE_PS_WORKER_GPUS = """
import runpy, sys
from tensorflow.python.distribute import parameter_server_strategy_v2 as pss

def fake_gpus(self):
    self._num_gpus_per_worker = {count}

pss.ParameterServerStrategyV2Extended._set_num_gpus = fake_gpus
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def start_script(
    base, script, hyperparameters, env, log_path, extra_env=None, local_cpu_replicas=None, stderr_path=None, boot=None
):
    """Run `python <script> --key value ...` in <base>/code, the way the container does;
    local_cpu_replicas=N: under MultiWorkerMirroredStrategy, N logical CPUs act as the host's GPUs;
    stderr_path: stderr to its own file (default: into the log); boot: Python code run first (`-c`), which
    runs the script itself (as FAKE_PS_WORKER_GPUS does)."""
    run_env = dict(env, **(extra_env or {}))
    log = open(log_path, "w")
    stderr = open(stderr_path, "w") if stderr_path else subprocess.STDOUT
    boot = ["-c", _LOCAL_CPU_REPLICAS, str(local_cpu_replicas)] if local_cpu_replicas else ["-c", boot] if boot else []
    return subprocess.Popen(
        [PYTHON, *boot, script] + argv_for(hyperparameters),
        cwd=Path(base) / "code",
        env=run_env,
        stdout=log,
        stderr=stderr,
        start_new_session=True,
    )


def synth_split(rows, eval_rows, seed, feature_size, field_size=39):
    from launcher.data import synth

    data = synth.generate(rows + eval_rows, seed=seed, field_size=field_size, feature_size=feature_size)
    return data.take(0, rows), data.take(rows, rows + eval_rows)


def write_tfrecords(directory, data, files):
    from launcher.data import synth_files

    return synth_files.write_tfrecords(directory, data, files)


def write_libsvm(directory, data, files):
    from launcher.data import synth_files

    return synth_files.write_libsvm(directory, data, files)


def metric_lines(text, kind):
    """Parsed `[dfm] <kind> step=.. loss=.. ...` lines -> list of dicts of floats."""
    rows = []
    for line in text.splitlines():
        if line.startswith(f"[dfm] {kind} "):
            rows.append({k: float(v) for k, v in (part.split("=", 1) for part in line.split()[2:])})
    return rows


# The ps server as the SageMaker TensorFlow toolkit starts it: TF_CONFIG's cluster unchanged (job
# `master`), no GPU; the toolkit's own wait for the master to go down ends it.
_TOOLKIT_PS = """
import json, os, socket, sys, time
import tensorflow as tf
cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
index = int(sys.argv[1])
server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="ps", task_index=index,
                              config=tf.compat.v1.ConfigProto(device_count={"GPU": 0}))
host, port = cluster["master"][0].rsplit(":", 1)
def up():
    try:
        with socket.create_connection((host, int(port)), timeout=1) as probe:
            return probe.getsockname() != probe.getpeername()
    except OSError:
        return False
seen, start = False, time.time()
while time.time() - start < 600:
    if up():
        seen = True
    elif seen:
        break
    time.sleep(0.5)
import resource  # what the toolkit's ps held at its peak (the bundled scripts' own processes say it themselves)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"[dfm] memory role=ps host=ps{index} peak_rss_mb={peak:.1f}")
sys.stdout.flush()
os._exit(0)
"""


def sagemaker_tf_config(cluster, task_type, index):
    return json.dumps({"cluster": cluster, "environment": "cloud", "task": {"type": task_type, "index": index}})


def start_toolkit_ps(cluster, index, env, log_path):
    run_env = dict(env, TF_CONFIG=sagemaker_tf_config(cluster, "ps", index))
    log = open(log_path, "w")
    return subprocess.Popen(
        [PYTHON, "-c", _TOOLKIT_PS, str(index)],
        env=run_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
