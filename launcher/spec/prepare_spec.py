"""The `prepare:` section of a spec: how `dfm data prepare` turns click logs into this job's training data on
Spark (SageMaker Processing, or local Spark with --local). See docs/data.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from launcher.spec.value_types import InstanceTypeName, S3Uri, _custom, _Strict

SPARK_VERSIONS = ("3.5",)  # the Spark processing images SDK v2 knows that are worth starting today
INPUT_FORMATS = ("libsvm", "tsv", "csv", "parquet")


class PrepareInput(_Strict):
    uri: S3Uri = Field(description="the click logs (a prefix or file; Spark reads s3:// directly)")
    format: Literal["libsvm", "tsv", "csv", "parquet"] = Field(
        description="libsvm: pre-indexed rows; tsv/csv/parquet: raw columns (features: names them)"
    )
    columns: list[str] | None = Field(None, description="tsv/csv: the column names in file order")
    header: bool = Field(False, description="tsv/csv: each file's first line names the columns (skipped)")
    local: str | None = Field(None, description="--local: a folder (or file) on this machine instead of uri")


class PrepareEval(_Strict):
    uri: S3Uri = Field(description="held-out rows, read as the input is (same format)")
    local: str | None = Field(None, description="--local: a folder (or file) on this machine instead of uri")


class Balance(_Strict):
    negative_rate: float = Field(gt=0, le=1, description="keep this share of the training negatives (eval keeps all)")


class SparkVersion(_Strict):
    version: Literal["3.5"] = Field("3.5", description="the SageMaker Spark processing image (3.5: py312, AL2023)")


class PrepareInstance(_Strict):
    type: InstanceTypeName = Field("ml.m5.4xlarge", description="processing instance type")
    count: int = Field(1, ge=1, le=100, description="processing instances (Spark executors on each)")
    volume_gb: int = Field(30, ge=1, le=16384, description="EBS volume per instance (shuffle spill, outputs)")


class Prepare(_Strict):
    """`dfm data prepare SPEC`: input -> bad rows -> eval split -> balance -> shuffle -> this job's layout."""

    input: PrepareInput
    eval_fraction: float | None = Field(None, ge=0, lt=1, description="share of the rows held out for eval")
    eval: PrepareEval | None = Field(None, description="or: a separate eval input")
    shuffle: bool = Field(True, description="seeded shuffle of the rows across and within files")
    seed: int = Field(0, ge=0, le=2**31 - 1)
    balance: Balance | None = None
    bad_rows: Literal["skip", "fail"] = Field("skip", description="skip: drop and count; fail: stop, write nothing")
    stats: bool = Field(True, description="also compute stats.json and a proposed features: section (one more pass)")
    files_per_worker: int | Literal["auto"] = Field(
        "auto",
        description="files per worker (per channel); auto: enough that the write stage has a task per vCPU "
        "of instance (one task writes one file)",
    )
    instance: PrepareInstance = Field(default_factory=PrepareInstance)
    spark: SparkVersion = Field(default_factory=SparkVersion)
    report: S3Uri | None = Field(None, description="where prepare.json and stats.json go; default <output>/prepare/")
    event_logs: S3Uri | None = Field(None, description="keep Spark's event logs here (for a Spark history server)")
    max_runtime: int = Field(86400, ge=1, le=777600, description="seconds before SageMaker stops the processing job")

    @model_validator(mode="after")
    def _one_eval(self) -> "Prepare":
        if isinstance(self.files_per_worker, int) and not 1 <= self.files_per_worker <= 1000:
            raise _custom("prepare_files", "files_per_worker: auto, or a number from 1 to 1000")
        if self.eval_fraction is not None and self.eval is not None:
            raise _custom("prepare_eval", "give either eval_fraction or eval: {uri: ...}, not both")
        return self
