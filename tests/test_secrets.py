"""Which environment names look secret, and masking them."""

from __future__ import annotations

import pytest

from launcher.cli.secrets import MASK, is_secret_name, mask_document, mask_environment


@pytest.mark.parametrize(
    "name",
    [
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "githubToken",
        "API_KEY_2",
        "apikey",
        "HF_TOKEN",
        "MYSQL_PASSWD",
        "Authorization",
        "PRIVATE_PEM",
        "GCP_CREDENTIALS",
        "wandb_api_keys",
        "SSH_PASSPHRASE",
    ],
)
def test_secret_looking_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "KEYBOARD",
        "MONKEY_PATCH",
        "DFM_LOG",
        "OMP_NUM_THREADS",
        "TOKENIZERS_PARALLEL_X",
        "PASSAGE_LEN",
        "AUTHOR",
        "SM_HOSTS",
        "PYTHONPATH",
    ],
)
def test_ordinary_names(name):
    assert not is_secret_name(name)


def test_mask_environment_hides_only_secret_values_and_show_reveals_them():
    env = {"DB_PASSWORD": "hunter2", "FEATURES": "wide", "EMPTY_TOKEN": ""}
    assert mask_environment(env) == {"DB_PASSWORD": MASK, "FEATURES": "wide", "EMPTY_TOKEN": ""}
    assert mask_environment(env, show=True) == env
    assert env["DB_PASSWORD"] == "hunter2"  # a copy: the caller's mapping is untouched
    assert mask_environment(None) == {}


def test_mask_document_masks_every_environment_mapping_in_a_dry_run_document():
    document = {
        "estimator": {"kwargs": {"environment": {"API_TOKEN": "t", "MODE": "x"}}},
        "request": {"Environment": {"DB_PASSWORD": "p"}},
        "processes": [{"env": {"AWS_SECRET_ACCESS_KEY": "k", "PATH": "/bin"}, "argv": ["API_TOKEN"]}],
    }
    masked = mask_document(document)
    assert masked["estimator"]["kwargs"]["environment"] == {"API_TOKEN": MASK, "MODE": "x"}
    assert masked["request"]["Environment"] == {"DB_PASSWORD": MASK}
    assert masked["processes"][0] == {"env": {"AWS_SECRET_ACCESS_KEY": MASK, "PATH": "/bin"}, "argv": ["API_TOKEN"]}
    assert mask_document(document, show=True) == document
