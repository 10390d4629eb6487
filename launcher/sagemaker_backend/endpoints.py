"""Endpoints dfm deployed: waiting until one is InService, and `dfm undeploy` (the endpoint deleted, and its config
and models when dfm made them: those carry dfm's tag)."""

from __future__ import annotations

import time
from typing import Callable

from launcher.errors import DfmError
from launcher.sagemaker_backend import aws
from launcher.sagemaker_backend.model_requests import MADE_BY

Echo = Callable[[str], None]
SETTLED = ("InService", "Failed", "OutOfService")


def describe(name: str, region: str | None) -> dict:
    region = aws.resolve_region(region)
    with aws.aws_errors(f"describing endpoint {name}", region=region):
        found = aws.client("sagemaker", region).describe_endpoint(EndpointName=name)
    return {
        "endpoint_name": found["EndpointName"],
        "status": found["EndpointStatus"],
        "failure_reason": found.get("FailureReason"),
        "endpoint_config_name": found.get("EndpointConfigName"),
        "console_url": console_url(name, region),
    }


def wait(name: str, region: str | None, *, echo: Echo, poll_seconds: float = 30.0) -> dict:
    """Polls until the endpoint settles; exit 1 unless it is InService."""
    last = None
    while True:
        summary = describe(name, region)
        if summary["status"] != last:
            echo(f"-- {name}: {summary['status']}")
            last = summary["status"]
        if summary["status"] in SETTLED:
            break
        time.sleep(poll_seconds)
    if summary["status"] != "InService":
        reason = f": {aws.one_line(summary['failure_reason'])}" if summary.get("failure_reason") else ""
        raise DfmError(f"endpoint {name} is {summary['status']}{reason}", 1)
    return summary


def _made_by_dfm(client, arn: str) -> bool:
    tags = client.list_tags(ResourceArn=arn).get("Tags", [])
    return any(tag.get("Key") == MADE_BY["Key"] and tag.get("Value") == MADE_BY["Value"] for tag in tags)


def _model(client, name: str) -> dict | None:
    """The model's description; None when it is gone already."""
    from botocore.exceptions import ClientError

    try:
        return client.describe_model(ModelName=name)
    except ClientError as err:
        if aws.not_found(err):
            return None
        raise


def undeploy(name: str, region: str | None, *, echo: Echo) -> list[str]:
    """Deletes the endpoint, then its config and the config's models if dfm made them. -> what was deleted."""
    region = aws.resolve_region(region)
    client = aws.client("sagemaker", region)
    with aws.aws_errors(f"describing endpoint {name}", region=region):
        endpoint = client.describe_endpoint(EndpointName=name)
        config_name = endpoint["EndpointConfigName"]
        config = client.describe_endpoint_config(EndpointConfigName=config_name)
    deleted = []
    with aws.aws_errors(f"deleting endpoint {name}", region=region):
        client.delete_endpoint(EndpointName=name)
    deleted.append(f"endpoint {name}")
    with aws.aws_errors(f"deleting what endpoint {name} used", region=region):
        if _made_by_dfm(client, config["EndpointConfigArn"]):
            client.delete_endpoint_config(EndpointConfigName=config_name)
            deleted.append(f"endpoint config {config_name}")
        for variant in config.get("ProductionVariants", []):
            model = _model(client, variant["ModelName"])
            if model is not None and _made_by_dfm(client, model["ModelArn"]):
                client.delete_model(ModelName=variant["ModelName"])
                deleted.append(f"model {variant['ModelName']}")
    for item in deleted:
        echo(f"deleted {item}")
    return deleted


def console_url(name: str, region: str) -> str:
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/endpoints/{name}"
