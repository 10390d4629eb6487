"""`dfm data ...`: synthesize, convert and split training data. Owner: issue 3 (data tools)."""

import click


@click.group()
def data() -> None:
    """Make and lay out training data (synthetic Criteo-like, libsvm -> TFRecord, balanced splits)."""
