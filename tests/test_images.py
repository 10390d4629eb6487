"""The image catalogue: consistent with the installed SDK's own image config, and URIs for the images it lacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.facts import images


def sdk_training_config() -> dict:
    import sagemaker

    path = Path(sagemaker.__file__).parent / "image_uri_config" / "tensorflow.json"
    return json.loads(path.read_text())["training"]


def test_the_table_agrees_with_the_sdk_where_they_overlap():
    training = sdk_training_config()
    sdk_2x = {v for v in training["versions"] if images.version_tuple(v) >= (2, 9)}
    assert {i.version for i in images.IMAGES.values() if i.sdk_v2} == sdk_2x  # every SDK image from 2.9 on, no more
    for image in images.IMAGES.values():
        if image.sdk_v2:
            assert training["versions"][image.version]["py_versions"] == [image.python], image.version
            assert training["version_aliases"][image.short] == image.version
        else:
            assert image.version not in training["versions"] and image.short not in training["version_aliases"]
            assert dict(image.tags).keys() == {"cpu", "gpu"}, f"dfm writes the URI of {image.version} itself"


def test_versions_with_no_image_are_neither_in_the_table_nor_in_the_sdk():
    training = sdk_training_config()
    for short in images.NO_IMAGE:
        assert short not in images.IMAGES and short not in training["version_aliases"]


def test_horovod_and_pipe_mode_stop_where_the_images_stop():
    with_horovod = [i.short for i in images.IMAGES.values() if i.horovod]
    with_pipe = [i.short for i in images.IMAGES.values() if i.pipe_mode]
    assert max(with_horovod, key=images.version_tuple) == images.LAST_HOROVOD_TF == "2.12"
    assert max(with_pipe, key=images.version_tuple) == "2.14"


@pytest.mark.parametrize(
    "version, found",
    [
        ("2.14", "2.14.1"),
        ("2.14.1", "2.14.1"),
        ("2.14.0", None),
        ("2.21", "2.21.0"),
        ("2.20", None),
        ("2", None),
        ("2.12.0", "2.12.0"),
    ],
)
def test_find_takes_the_short_or_the_exact_full_version(version, found):
    image = images.find(version)
    assert (image.version if image else None) == found


def test_a_uri_for_the_image_sdk_v2_lacks_uses_the_dlc_registry_of_the_region():
    image = images.find("2.21")
    assert images.image_uri(image, "us-east-1", "gpu") == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training:2.21.0-gpu-py312-cu129-amzn2023-sagemaker"
    )
    assert images.image_uri(image, "us-east-1", "cpu").endswith(":2.21.0-cpu-py312-amzn2023-sagemaker")
    accounts = dict(image.registries)
    region = next(r for r in accounts if r.startswith("cn-"))
    assert images.image_uri(image, region, "cpu").startswith(f"{accounts[region]}.dkr.ecr.{region}.amazonaws.com.cn/")
    assert images.image_uri(image, "xx-nowhere-1", "cpu") is None


def test_the_2_21_registries_are_the_dlc_accounts_the_sdk_uses_in_each_region():
    """A region's DLC registry account is the same for every DLC image: where SDK v2 publishes 2.19, its account
    for the region must be the one dfm writes into the 2.21 URI."""
    sdk = sdk_training_config()["versions"]["2.19.0"]["registries"]
    ours = dict(images.find("2.21").registries)
    assert ours and {region: sdk[region] for region in ours if region in sdk} == {
        region: account for region, account in ours.items() if region in sdk
    }


@pytest.mark.parametrize("region", ["me-west-1", "us-gov-west-1", "cn-northwest-1"])
def test_2_21_validates_exactly_in_the_regions_of_its_registry_table(tmp_path, region):
    """The table, not another version's SDK entry, decides where 2.21 runs (SDK v3's config lists no me-west-1)."""
    from spec_helpers import write_spec

    from launcher.compile import compile_spec

    compiled = compile_spec(write_spec(tmp_path, {"region": region, "framework": {"version": "2.21"}}), env={})
    refused = [e for e in compiled.errors if "is not published in" in e]
    assert bool(refused) == (region not in dict(images.find("2.21").registries)), compiled.errors


def test_the_sdk_builds_the_same_uri_scheme_for_the_images_it_knows():
    """dfm's scheme for 2.21 is the DLC's; check the account/domain part against the SDK for a version it knows."""
    from sagemaker import image_uris

    sdk = image_uris.retrieve(
        "tensorflow",
        "eu-west-1",
        version="2.19",
        py_version="py312",
        instance_type="ml.c5.xlarge",
        image_scope="training",
    )
    ours = images.image_uri(images.find("2.21"), "eu-west-1", "cpu")
    assert sdk.split("/")[0] == ours.split("/")[0] and sdk.split("/")[1].split(":")[0] == images.DLC_REPOSITORY
