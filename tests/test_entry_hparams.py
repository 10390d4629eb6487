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


@pytest.mark.parametrize("text,expected", [
    ("[400, 400]", [400, 400]),
    (json.dumps([128, 64, 32]), [128, 64, 32]),
    ("['256', '128']", [256, 128]),
    ("[256, 128]".replace(" ", ""), [256, 128]),
    ("300,200", [300, 200]),
    (" 300 , 200 ", [300, 200]),
    ("64", [64]),
    ('"[32, 16]"', [32, 16]),
])
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
    args = H.parse_hyperparameters(["--learning_rate", "0.5", "--epochs", "3", "--optimizer", "FTRL",
                                    "--s3_shard", "False", "--mixed_precision", "1", "--prefetch", "-1"])
    assert (args.learning_rate, args.epochs, args.optimizer) == (0.5, 3, "ftrl")
    assert (args.s3_shard, args.mixed_precision, args.prefetch) == ("false", "true", -1)


@pytest.mark.parametrize("argv", [["--optimizer", "rmsprop"], ["--dropout", "1.5"], ["--batch_size", "0"],
                                  ["--epochs", "one"], ["--data_format", "csv"], ["--ps_per_host", "0"],
                                  ["--l2_reg", "-0.1"], ["--l2_dense", "-1"], ["--best_of", "train:auc"],
                                  ["--early_stopping_patience", "-1"],
                                  ["--early_stopping_patience", "2", "--best_of", "last"]])
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
