"""Commands about submitted jobs: status, logs, stop, list. Owner: issue 2 (SageMaker backend)."""

COMMANDS: list = []
