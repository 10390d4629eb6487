"""Hyperparameters as SageMaker sends them: `--key value`, JSON-encoded values, `False` as a string."""

import json

import pytest

import entry_support as es  # also puts entrypoints/ on sys.path
import deepfm_hparams as H


@pytest.mark.parametrize("text", ["False", "false", "0", "no", "FALSE", '"false"'])
def test_false_spellings_are_false(text):
    assert H.parse_hyperparameters(["--batch_norm", "true", "--batch_norm", text]).batch_norm is False
    assert H.parse_hyperparameters(["--export", text]).export is False


@pytest.mark.parametrize("text", ["True", "true", "1", "yes"])
def test_true_spellings_are_true(text):
    assert H.parse_hyperparameters(["--batch_norm", text]).batch_norm is True


def test_not_a_boolean_is_an_error_naming_the_flag():
    with pytest.raises(H.HyperparameterError, match="--cache"):
        H.parse_hyperparameters(["--cache", "maybe"])


@pytest.mark.parametrize(
    "text,expected",
    [
        ("[400, 400]", [400, 400]),
        (json.dumps([128, 64, 32]), [128, 64, 32]),
        ("['256', '128']", [256, 128]),
        ("[256, 128]".replace(" ", ""), [256, 128]),
        ("300,200", [300, 200]),
        (" 300 , 200 ", [300, 200]),
        ("64", [64]),
        ('"[32, 16]"', [32, 16]),
    ],
)
def test_list_spellings(text, expected):
    assert H.parse_hyperparameters(["--deep_layers", text]).deep_layers == expected


def test_bad_list_is_an_error():
    with pytest.raises(H.HyperparameterError, match="--deep_layers"):
        H.parse_hyperparameters(["--deep_layers", "[400, big]"])


def test_unknown_flag_is_an_error_naming_it():
    with pytest.raises(H.HyperparameterError, match="--embeding_size"):
        H.parse_hyperparameters(["--embeding_size", "8"])


def test_model_dir_injected_by_the_sdk_is_accepted():
    args = H.parse_hyperparameters(["--model_dir", "s3://bucket/job/model"])
    assert args.model_dir == "s3://bucket/job/model"


def test_values_are_converted_to_the_default_type():
    args = H.parse_hyperparameters(
        [
            "--learning_rate",
            "0.5",
            "--epochs",
            "3",
            "--optimizer",
            "FTRL",
            "--s3_shard",
            "False",
            "--mixed_precision",
            "1",
            "--prefetch",
            "-1",
        ]
    )
    assert (args.learning_rate, args.epochs, args.optimizer) == (0.5, 3, "ftrl")
    assert (args.s3_shard, args.mixed_precision, args.prefetch) == ("false", "float16", -1)


@pytest.mark.parametrize(
    "argv",
    [
        ["--optimizer", "rmsprop"],
        ["--dropout", "1.5"],
        ["--batch_size", "0"],
        ["--epochs", "one"],
        ["--data_format", "csv"],
        ["--ps_per_host", "0"],
        ["--l2_reg", "-0.1"],
        ["--l2_dense", "-1"],
        ["--best_of", "train:auc"],
        ["--early_stopping_patience", "-1"],
        ["--early_stopping_patience", "2", "--best_of", "last"],
    ],
)
def test_out_of_range_values_are_errors_naming_the_flag(argv):
    with pytest.raises(H.HyperparameterError, match=argv[0]):
        H.parse_hyperparameters(argv)


def test_best_of_reads_an_empty_value_as_last_and_patience_follows_its_metric():
    assert H.parse_hyperparameters(["--best_of", '""']).best_of == "last"
    args = H.parse_hyperparameters(["--best_of", "EVAL:LOSS", "--early_stopping_patience", "3"])
    assert (args.best_of, args.early_stopping_patience) == ("eval:loss", 3)


def test_every_default_renders_and_parses_back_with_its_type():
    """What the SDK sends for the defaults (json.dumps of each) parses to the defaults, type included."""
    parsed = vars(H.parse_hyperparameters(es.argv_for(H.DEFAULTS)))
    assert {k: (type(v), v) for k, v in parsed.items()} == {k: (type(v), v) for k, v in H.DEFAULTS.items()}


@pytest.mark.parametrize(
    "replicas, rows, expected",
    [
        # the default table (117,581 rows x 9 floats, 4.2 MB): a ring all-reduce moves ~8.5 MB per replica;
        # gathering 1024 x 39 rows and ids moves ~2.1 MB per replica, so dense wins from 5 replicas on
        (1, 117581, "gather"),
        (2, 117581, "gather"),
        (4, 117581, "gather"),
        (5, 117581, "dense"),
        (8, 117581, "dense"),
        (8, 10**7, "gather"),
    ],
)
def test_sparse_allreduce_auto_picks_the_cheaper_exchange(replicas, rows, expected):
    assert H.resolve_sparse_allreduce("auto", rows, 8, 1024, 39, replicas) == expected


def test_sparse_allreduce_auto_at_the_default_batch_goes_dense_from_9_replicas_and_never_for_ftrl():
    """At batch_size 512 a replica gathers ~1.04 MB per step against the dense ring's ~8.5 MB: dense from 9
    replicas on (docs/gpu.md says so). FTRL never: a dense update zeroes the rows outside the batch."""
    args = [H.DEFAULTS[k] for k in ("feature_size", "embedding_size", "batch_size", "field_size")]
    assert [H.resolve_sparse_allreduce("auto", *args, r, "adagrad") for r in (8, 9)] == ["gather", "dense"]
    assert H.resolve_sparse_allreduce("auto", *args, 64, "ftrl") == "gather"
    with pytest.raises(H.HyperparameterError, match="zero every row outside the batch"):
        H.parse_hyperparameters(["--sparse_allreduce", "dense", "--optimizer", "ftrl"])


def test_sparse_allreduce_is_a_choice_that_overrides_auto():
    assert (
        H.parse_hyperparameters(["--sparse_allreduce", "Dense", "--optimizer", "adagrad"]).sparse_allreduce == "dense"
    )
    assert H.resolve_sparse_allreduce("dense", 10**9, 8, 1024, 39, 2) == "dense"
    assert H.resolve_sparse_allreduce("gather", 10, 8, 1024, 39, 64) == "gather"
    with pytest.raises(H.HyperparameterError, match="--sparse_allreduce"):
        H.parse_hyperparameters(["--sparse_allreduce", "nccl"])
    # Adam stays lazy: auto keeps it sparse, dense is refused
    assert H.resolve_sparse_allreduce("auto", 117581, 8, 1024, 39, 8, "adam") == "gather"
    with pytest.raises(H.HyperparameterError, match="lazy Adam"):
        H.parse_hyperparameters(["--sparse_allreduce", "dense", "--optimizer", "adam"])


@pytest.mark.parametrize(
    "argv,step,expected",
    [
        ([], 0, 100),  # the next train line
        ([], 950, 50),
        (["--eval_steps", "30"], 0, 30),
        (["--eval_steps", "30"], 85, 5),  # the evaluation at 90 comes before the line at 100
        (["--eval_steps", "300", "--checkpoint_steps", "250"], 240, 10),
        (["--eval_steps", "30", "--max_steps", "87"], 85, 2),
    ],
)
def test_the_host_looks_at_the_next_line_checkpoint_evaluation_or_max_steps(argv, step, expected):
    assert H.steps_to_boundary(step, H.parse_hyperparameters(argv)) == expected


@pytest.mark.parametrize(
    "step,with_lines,without",
    [(0, 20, 300), (290, 10, 10), (300, 20, 200), (480, 20, 20), (495, 5, 5)],
)
def test_a_window_whose_train_lines_need_no_end_skips_the_log_steps(step, with_lines, without):
    # a parameter-server chief prints its lines while a window runs: its windows end at checkpoints (500),
    # evaluations (300) and max_steps (1000) only
    hp = H.parse_hyperparameters(["--log_steps", "20", "--checkpoint_steps", "500", "--eval_steps", "300"])
    assert H.steps_to_boundary(step, hp) == H.steps_to_boundary(step, hp, lines=True) == with_lines
    assert H.steps_to_boundary(step, hp, lines=False) == without
    assert H.steps_to_boundary(995, H.parse_hyperparameters(["--max_steps", "1000"]), lines=False) == 5


def test_an_evaluation_is_due_when_a_window_reaches_a_multiple_of_eval_steps():
    assert [H.crossed(previous, step, 30) for previous, step in [(0, 30), (29, 30), (30, 59), (58, 61), (61, 61)]] == [
        True,
        True,
        False,
        True,
        False,
    ]
    assert not H.crossed(0, 1000, 0)  # eval_steps 0: evaluations follow the epochs


def test_eval_batches_and_eval_steps_are_counts_the_scripts_bound():
    args = H.parse_hyperparameters(["--eval_steps", "500", "--eval_batches", "20"])
    assert (args.eval_steps, args.eval_batches) == (500, 20)
    for flag in ("--eval_steps", "--eval_batches"):
        with pytest.raises(H.HyperparameterError, match=flag):
            H.parse_hyperparameters([flag, "-1"])
