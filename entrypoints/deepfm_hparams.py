"""Hyperparameters of the bundled DeepFM entry points: defaults and a parser for SageMaker's argv.

SageMaker passes each hyperparameter as `--key value` with the value JSON-encoded by the SDK, so a
Python False arrives as the string "False" and a list as "[400, 400]". argparse's `type=bool` would
read "False" as true, so every flag here has an explicit converter. No TensorFlow import: the tuning
environment variables must be set from these values before TensorFlow starts.
"""

import argparse
import ast
import json
import math
import os
import sys

# `--features @NAME`: the section is in NAME beside these scripts (the launcher ships it in the source dir)
FEATURES_FILE_PREFIX = "@"

DEFAULTS = {
    # model
    "field_size": 39,
    "feature_size": 117581,
    "embedding_size": 8,
    "deep_layers": [64, 32],  # small: a 400x3 MLP memorizes a 200k-row sample within an epoch
    "dropout": 0.2,
    "batch_norm": False,
    "l2_reg": 1e-5,  # L2 on the embedding and first-order rows each batch looks up (sparse: only those rows)
    # L2 on the MLP kernels. 0: 0.03 shuts the MLP off, which costs nothing on FM-teacher samples but 0.0095 AUC on
    # held-out real data and 0.0078 on bench/quality.py's deep8 sample
    "l2_dense": 0.0,
    # training
    "optimizer": "adam",
    "learning_rate": 0.002,
    "batch_size": 512,
    "epochs": 1,
    "max_steps": 0,
    "log_steps": 100,
    "checkpoint_steps": 1000,
    "eval_steps": 0,  # evaluate every this many training steps (on the eval channel); 0: after every epoch
    "eval_batches": 0,  # batches one evaluation reads, over all workers; 0: the whole eval channel
    "best_of": "eval:auc",  # export the model of the best evaluation by this metric; `last`: the last model
    "early_stopping_patience": 0,  # stop after this many evaluations without a better best_of metric; 0: off
    "scale_lr": True,
    # train and evaluate a logistic regression beside the model (deepfm_baseline); off by default: it measured
    # 10.9% of the step, above the 5% a default may cost (docs/quality.md); configs/ps.yaml (the demo) turns it on
    "baseline": False,
    # data
    "data_format": "tfrecord",
    "shuffle_buffer": 10000,
    "prefetch": 2,
    "cache": False,
    "s3_shard": "auto",
    "features": "",  # JSON of the spec's `features:` section (raw features); empty = pre-indexed input
    # share of the negatives the training data kept (dfm data prepare's balance); the export undoes it
    "negative_rate": 1.0,
    # cluster (deepfm-ps)
    "ps_group": "",  # instance group of the parameter servers (heterogeneous job); empty = no such group
    "ps_per_host": 1,  # parameter servers on each host of ps_group
    "steps_per_closure": 16,  # parameter server: training steps a worker runs per closure the chief sends
    # parameter server: end a window at each train line, the chief waiting for every worker's closures (exact
    # windows, at that wait's cost): dfm probe's timed windows; a job's lines need no window end
    "line_barrier": False,
    "local_steps": 1,  # parameter server: steps a worker trains on its own copy between exchanges with the ps
    # tuning
    "intra_op_threads": 0,
    "inter_op_threads": 0,
    "kmp_affinity": "granularity=fine,compact,1,0",
    "omp_num_threads": 0,
    "data_threads": 0,  # tf.data's private thread pool (0: the process's share of the host's vCPUs)
    "kmp_settings": False,
    "mixed_precision": "auto",
    # synchronous runs (Horovod, MultiWorkerMirrored): how the embedding gradients travel
    "sparse_allreduce": "auto",
    "sync_check_steps": 16,  # steps between the host's reads of the in-step end-of-data check
    # outputs
    "model_dir": "",
    "checkpoint_dir": "",
    "export": True,
    "tensorboard_dir": "",  # the chief's TensorBoard scalars (dfm sets it from tensorboard:); empty: none
    # warm start (dfm sets them from warm_start:): what to restore from the warmstart or model channel ("": off)
    "warm_start": "",
    "warm_start_steps": "restart",  # restart | continue the step counter and learning-rate schedule
    "warm_start_source": "",  # the source as the user named it (job name or URI), for the first log line
}

CHOICES = {
    "optimizer": ("adam", "adagrad", "ftrl", "sgd"),
    "data_format": ("tfrecord", "libsvm"),
    "s3_shard": ("auto", "true", "false"),
    "mixed_precision": ("auto", "float16", "bfloat16", "false"),  # true = float16 (deepfm_precision)
    "best_of": ("eval:auc", "eval:loss", "last"),
    "sparse_allreduce": ("auto", "dense", "gather"),
    "warm_start": ("", "all", "embeddings"),
    "warm_start_steps": ("restart", "continue"),
}

# Optimizers a dense embedding gradient would change (sparse_allreduce: dense refused, auto keeps gather), and why.
SPARSE_ONLY = {
    "adam": "dense would make the lazy Adam dense (every row's moments decaying each step)",
    # TF's FTRL sets each updated row to its closed form from `linear` and `accum`: a zero gradient row whose
    # |linear| <= l1 (every row no batch has touched yet) becomes zeros, so a dense gradient wipes the table's
    # initial values on the first step (tests/test_entry_model.py shows it)
    "ftrl": "dense would zero every row outside the batch (TF's FTRL sets a row with a zero gradient and |linear| "
    "<= l1 to 0: the whole untouched table on the first step)",
}

LOCAL_STEP_OPTIMIZERS = ("adagrad", "sgd")  # deepfm_local_steps: a zero gradient leaves a row as it was

TRUE_WORDS = ("true", "1", "yes", "y", "on")
FALSE_WORDS = ("false", "0", "no", "n", "off")


def resolve_sparse_allreduce(value, rows, embedding_size, batch_size, field_size, replicas, optimizer="adagrad"):
    """`sparse_allreduce` -> "dense" or "gather": how a synchronous run averages the embedding gradients.

    dense: the table-sized gradient is all-reduced (a ring sends and receives about twice the table per
    replica; NCCL does it on the GPU). gather: each replica's rows and ids are all-gathered (each replica
    receives every replica's batch_size x field_size rows of both tables, with int64 ids). auto: the one
    that moves fewer bytes per step; with one replica nothing moves and the sparse update is kept. Adam and
    FTRL keep gather under auto (SPARSE_ONLY says why); Adagrad and SGD leave a row whose gradient is zero
    as it was, so for them both exchanges train the same."""
    if value in ("dense", "gather"):
        return value
    if replicas <= 1 or optimizer in SPARSE_ONLY:
        return "gather"
    row_bytes = (1 + embedding_size) * 4  # a row of both tables, float32
    dense = 2 * rows * row_bytes
    gather = replicas * batch_size * field_size * (row_bytes + 2 * 8)
    return "dense" if dense <= gather else "gather"


def steps_to_boundary(step, hp, lines=True):
    """Steps from `step` to the next one at which the host has work: a train line (log_steps, unless `lines`
    is False: a distribution that prints its train lines while a window runs), a checkpoint, an evaluation
    (eval_steps, when set) or max_steps."""
    todo = hp.checkpoint_steps - step % hp.checkpoint_steps
    if lines:
        todo = min(todo, hp.log_steps - step % hp.log_steps)
    if hp.eval_steps:
        todo = min(todo, hp.eval_steps - step % hp.eval_steps)
    return min(todo, hp.max_steps - step) if hp.max_steps else todo


def crossed(previous, step, every):
    """Whether steps previous+1..step reached a multiple of `every` (0: never)."""
    return bool(every) and step // every > previous // every


def parse_bool(text):
    """ "True/true/1/yes" -> True, "False/false/0/no" -> False; anything else is an error."""
    if isinstance(text, bool):
        return text
    word = str(text).strip().strip("\"'").lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false/1/0/yes/no), got {text!r}")


def parse_int_list(text):
    """`[400, 400]` (JSON), `['400', '400']` (Python repr), `400,400` or `400` -> [400, 400]."""
    if isinstance(text, (list, tuple)):
        items = list(text)
    else:
        raw = str(text).strip()
        if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":  # JSON-encoded twice
            raw = raw[1:-1].strip()
        items = None
        if raw.startswith("["):
            for loads in (json.loads, ast.literal_eval):
                try:
                    items = list(loads(raw))
                    break
                except (ValueError, SyntaxError):
                    continue
            if items is None:
                raw = raw.strip("[]")
        if items is None:
            items = [part for part in (p.strip().strip("\"'") for p in raw.split(",")) if part]
    try:
        return [int(item) for item in items]
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a list of integers, got {text!r}") from None


def _choice(name):
    allowed = CHOICES[name]

    def convert(text):
        word = str(text).strip().strip("\"'").lower()
        if name == "best_of" and word in ("", "none"):
            word = "last"
        if name in ("s3_shard", "mixed_precision") and word not in allowed:
            try:
                word = ("float16" if name == "mixed_precision" else "true") if parse_bool(word) else "false"
            except argparse.ArgumentTypeError:
                pass
        if word not in allowed:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(allowed)}, got {text!r}")
        return word

    return convert


def _string(text):
    return str(text).strip().strip("\"'") if text is not None else ""


def _converter(name, default):
    if name in CHOICES:
        return _choice(name)
    if isinstance(default, bool):
        return parse_bool
    if isinstance(default, int):
        return int
    if isinstance(default, float):
        return float
    if isinstance(default, list):
        return parse_int_list
    return _string


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise HyperparameterError(message)


class HyperparameterError(ValueError):
    """A bad or unknown hyperparameter; the message names the flag."""


def build_parser(prog="train"):
    parser = _Parser(prog=prog, allow_abbrev=False, add_help=True)
    for name, default in DEFAULTS.items():
        parser.add_argument(
            f"--{name}", dest=name, type=_converter(name, default), default=default, metavar=name.upper()
        )
    return parser


# The values each number may take (the scripts refuse others before TensorFlow starts; the launcher checks a
# spec against the same table offline, and tuning ranges must lie inside it). name -> (lowest, highest);
# None: no bound. Bounds are inclusive unless named in OPEN_BOUNDS.
BOUNDS = {
    "field_size": (1, None),
    "feature_size": (1, None),
    "embedding_size": (1, None),
    "dropout": (0.0, 1.0),
    "l2_reg": (0.0, None),
    "l2_dense": (0.0, None),
    "learning_rate": (0.0, None),
    "batch_size": (1, None),
    "epochs": (0, None),  # 0: repeat the data until max_steps (value_problems refuses 0 without max_steps)
    "max_steps": (0, None),
    "log_steps": (1, None),
    "checkpoint_steps": (1, None),
    "eval_steps": (0, None),
    "eval_batches": (0, None),
    "early_stopping_patience": (0, None),
    "shuffle_buffer": (0, None),
    "prefetch": (-1, None),
    "ps_per_host": (1, None),
    "steps_per_closure": (1, None),
    "local_steps": (1, None),
    "sync_check_steps": (1, None),
    "negative_rate": (0.0, 1.0),  # the share of negatives dfm data prepare kept; 1: none dropped
    "intra_op_threads": (0, None),
    "inter_op_threads": (0, None),
    "omp_num_threads": (0, None),
    "data_threads": (0, None),
}
OPEN_BOUNDS = {("learning_rate", "low"), ("dropout", "high"), ("negative_rate", "low")}


def bound_problem(name, value):
    """Why `value` is outside what `--name` accepts, or None. Lists (deep_layers) need positive sizes."""
    if name == "deep_layers":
        return None if all(size > 0 for size in value) else f"sizes must be positive, got {value}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    low, high = BOUNDS.get(name, (None, None))
    if low is not None and (value <= low if (name, "low") in OPEN_BOUNDS else value < low):
        return f"must be {'above' if (name, 'low') in OPEN_BOUNDS else 'at least'} {low}, got {value}"
    if high is not None and (value >= high if (name, "high") in OPEN_BOUNDS else value > high):
        return f"must be {'below' if (name, 'high') in OPEN_BOUNDS else 'at most'} {high}, got {value}"
    return None


def value_problems(args):
    """[(name, message)] for every parsed value outside BOUNDS."""
    problems = []
    for name in ("deep_layers", *BOUNDS):
        problem = bound_problem(name, getattr(args, name))
        if problem:
            problems.append((name, problem))
    if args.early_stopping_patience and args.best_of == "last":
        problems.append(
            (
                "early_stopping_patience",
                "follows the best_of metric: set best_of to eval:auc or eval:loss, or the patience to 0",
            )
        )
    if args.sparse_allreduce == "dense" and args.optimizer in SPARSE_ONLY:
        problems.append(
            (
                "sparse_allreduce",
                f"{SPARSE_ONLY[args.optimizer]}: use gather or auto with {args.optimizer}, or adagrad or sgd",
            )
        )
    if args.local_steps > 1 and args.optimizer not in LOCAL_STEP_OPTIMIZERS:
        problems.append(
            (
                "local_steps",
                f"local steps train a copy of the rows they use, which {args.optimizer} would change where the "
                f"gradient is zero: set optimizer to {' or '.join(LOCAL_STEP_OPTIMIZERS)}, or local_steps to 1",
            )
        )
    if args.epochs == 0 and args.max_steps == 0:
        problems.append(
            (
                "epochs",
                "0 repeats the data until max_steps, and max_steps is 0 (no limit): the job would "
                "never end; give epochs >= 1 or max_steps > 0",
            )
        )
    return problems


def convert(name, text):
    """One value as the scripts parse `--name text`; raises HyperparameterError naming the flag."""
    try:
        return _converter(name, DEFAULTS[name])(text)
    except argparse.ArgumentTypeError as err:
        raise HyperparameterError(f"argument --{name}: {err}") from None
    except (TypeError, ValueError):
        kind = "an integer" if isinstance(DEFAULTS[name], int) else "a number"
        raise HyperparameterError(f"argument --{name}: expected {kind}, got {text!r}") from None


def parse_hyperparameters(argv, prog="train"):
    """argv (without the program name) -> argparse.Namespace with every key of DEFAULTS.

    Unknown flags raise HyperparameterError naming them (a typo must not silently train with a
    default)."""
    args = build_parser(prog).parse_args(list(argv))
    for name, problem in value_problems(args)[:1]:
        raise HyperparameterError(f"argument --{name}: {problem}")
    if args.features:
        apply_features(args)
    return args


def features_json(value):
    """The --features value: JSON, or `@NAME`: a file shipped beside these scripts (a section too long
    for a SageMaker hyperparameter value)."""
    if not value.startswith(FEATURES_FILE_PREFIX):
        return value
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), value[len(FEATURES_FILE_PREFIX) :])
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as err:
        raise HyperparameterError(f"argument --features: cannot read {path}: {err.strerror}") from None


def apply_features(args):
    """Parse --features (JSON) into args.feature_spec and set field_size/feature_size from its layout."""
    import deepfm_features as F

    text = features_json(args.features)
    try:
        spec = F.spec_from_dict(json.loads(text))
    except (ValueError, F.SpecError) as err:
        raise HyperparameterError(f"argument --features: {err}") from None
    layout = F.build_layout(spec)
    args.feature_spec, args.field_size, args.feature_size = spec, layout.field_size, layout.feature_size


def feature_spec(args):
    """The raw-feature spec of a run, or None for pre-indexed input."""
    return getattr(args, "feature_spec", None)


def parse_or_exit(argv, prog):
    """parse_hyperparameters, or exit 2 naming the bad flag, before TensorFlow starts (as argparse does)."""
    try:
        return parse_hyperparameters(argv, prog=prog)
    except HyperparameterError as err:
        print(f"{prog}: {err}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
