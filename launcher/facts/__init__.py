"""What dfm knows of SageMaker, its images and instance types, and the bundled entry points."""
