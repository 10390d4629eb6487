"""Serving an exported model as SageMaker's TensorFlow inference container does: the artifact's layout, the
request contract, and a local server emulating it."""
