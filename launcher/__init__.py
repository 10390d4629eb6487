"""dfm: a YAML job spec -> a validated SageMaker TensorFlow job, its dry run, or a local emulation."""

__version__ = "0.1.0"
