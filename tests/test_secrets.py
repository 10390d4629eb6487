"""Which environment names look secret, and masking them."""

from __future__ import annotations

import pytest

from launcher.secrets import MASK, is_secret_name, mask_environment


@pytest.mark.parametrize("name", ["DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "githubToken",
                                  "API_KEY_2", "apikey", "HF_TOKEN", "MYSQL_PASSWD", "Authorization", "PRIVATE_PEM",
                                  "GCP_CREDENTIALS", "wandb_api_keys", "SSH_PASSPHRASE"])
def test_secret_looking_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["KEYBOARD", "MONKEY_PATCH", "DFM_LOG", "OMP_NUM_THREADS", "TOKENIZERS_PARALLEL_X",
                                  "PASSAGE_LEN", "AUTHOR", "SM_HOSTS", "PYTHONPATH"])
def test_ordinary_names(name):
    assert not is_secret_name(name)


def test_mask_environment_hides_only_secret_values_and_show_reveals_them():
    env = {"DB_PASSWORD": "hunter2", "FEATURES": "wide", "EMPTY_TOKEN": ""}
    assert mask_environment(env) == {"DB_PASSWORD": MASK, "FEATURES": "wide", "EMPTY_TOKEN": ""}
    assert mask_environment(env, show=True) == env
    assert env["DB_PASSWORD"] == "hunter2"  # a copy: the caller's mapping is untouched
    assert mask_environment(None) == {}
