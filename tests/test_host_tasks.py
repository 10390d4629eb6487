"""launcher.plans.tasks.host_tasks: the processes and replicas one host runs, as the bundled scripts start them."""

import pytest

from launcher.plans.tasks import host_tasks


@pytest.mark.parametrize(
    "instance_type, distribution, processes, expected",
    [
        ("ml.p3.8xlarge", "parameter_server", 1, (4, 1, 1)),  # one worker task per GPU, each seeing one
        ("ml.g5.2xlarge", "parameter_server", 1, (1, 1, 1)),
        ("ml.c5.18xlarge", "parameter_server", 1, (1, 1, 0)),
        ("ml.g5.12xlarge", "multi_worker_mirrored", 1, (1, 4, 4)),  # one process driving 4 replicas
        ("ml.c5.4xlarge", "multi_worker_mirrored", 1, (1, 1, 0)),
        ("ml.p3.16xlarge", "horovod", 8, (8, 1, 1)),
        ("ml.c5.18xlarge", "horovod", 4, (4, 1, 0)),
        ("ml.g5.12xlarge", "none", 1, (1, 1, 4)),
    ],
)
def test_tasks_and_replicas_per_host(instance_type, distribution, processes, expected):
    host = host_tasks(instance_type, distribution, processes)
    assert (host.worker_tasks, host.replicas_per_task, host.gpus_per_task) == expected
    assert host.replicas == expected[0] * expected[1]
