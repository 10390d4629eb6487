"""What goes into sourcedir.tar.gz: listed by the dry run, packed by the submit, the same files."""

from __future__ import annotations

import io
import json
import tarfile

import boto3

from launcher import sagemaker_backend as sb
from launcher.sagemaker_backend.source_files import LARGE_BYTES, list_source, parse_rules

BUCKET = "dfm-test-bucket"


def make_source(folder):
    (folder / ".git" / "objects").mkdir(parents=True)
    (folder / ".git" / "objects" / "pack").write_bytes(b"x" * 100)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"x")
    (folder / "lib").mkdir()
    (folder / "lib" / "util.py").write_text("Y = 2\n")
    (folder / "lib" / "keep.log").write_text("kept\n")
    (folder / "data").mkdir()
    (folder / "data" / "blob.bin").write_bytes(b"\0" * 1000)
    (folder / "notes.log").write_text("x\n")
    (folder / ".dfmignore").write_text("# big things\ndata/\n*.log\n!lib/keep.log\n")
    return folder


def test_git_pycache_and_what_dfmignore_names_are_left_out(source_dir):
    listing = list_source(str(make_source(source_dir)))
    assert [path for path, _ in listing.files] == ["helpers.py", "lib/keep.log", "lib/util.py", "train.py"]
    assert listing.skipped == (".dfmignore", ".git/", "__pycache__/", "data/", "notes.log")
    assert listing.total_bytes == sum(size for _, size in listing.files) and listing.warning() is None


def test_gitignore_forms():
    rules = parse_rules(["/build", "docs/*.md", "**/cache", "tmp/"])
    matched = lambda path, folder=False: any(r.matches(path, folder) for r in rules)  # noqa: E731
    assert matched("build") and not matched("src/build")  # anchored
    assert matched("docs/a.md") and not matched("a.md")
    assert matched("cache", True) and matched("a/b/cache", True)
    assert matched("x/tmp", True) and not matched("x/tmp")  # folders only


def test_past_the_size_the_listing_warns_naming_the_biggest_files(source_dir):
    (source_dir / "model.h5").write_bytes(b"\0" * (LARGE_BYTES + 1))
    warning = list_source(str(source_dir)).warning()
    assert warning and "model.h5 (10.0 MB)" in warning and ".dfmignore" in warning


def test_the_dry_run_lists_the_upload_and_the_submit_packs_exactly_it(aws, sample_plan, source_dir, monkeypatch):
    make_source(source_dir)
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    plan = sample_plan()
    document = sb.dry_run(plan)
    assert document["source"]["files"] == 4 and "data/" in document["source"]["skipped"]

    sb.submit(sb.build(plan), echo=lambda line: None)

    uri = json.loads(document["request"]["HyperParameters"]["sagemaker_submit_directory"])
    archive = (
        boto3.client("s3", region_name="us-east-1").get_object(Bucket=BUCKET, Key=uri.split("/", 3)[3])["Body"].read()
    )
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        shipped = sorted(member.name for member in tar.getmembers() if member.isfile())
    assert shipped == ["helpers.py", "lib/keep.log", "lib/util.py", "train.py"]
