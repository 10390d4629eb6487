"""The helper that tells TensorFlow's C++ log records from the scripts' lines, on output a CI run printed."""

from tf_records import script_lines

CHIEF_FAILING_ON_A_BAD_ROW = """\
[algo-1/master] 2026-11-29 04:31:29.956979: E ./tensorflow/tsl/distributed_runtime/rpc/grpc_util.h:110] Truncated \
error message: INVALID_ARGUMENT: 3 root error(s) found.
[algo-1/master] Additional GRPC error information from remote target /job:worker/replica:0/task:1:
[algo-1/master] :{"created":"@1795926689.993117596","description":"Error received from peer ipv4:127.0.0.1:27859"}
[algo-2/worker] [dfm] worker 0: chief finished; exiting
[algo-1/master]   (2) INVALID_ARGUMENT: {{function_node __inference_worker_steps_1954}} assertion failed
[algo-1/master] 0 derived errors ignored.
[algo-1/master] [dfm] error: bad input data in part-00000.tsv: line 1001
E1129 04:31:29.956979 140000 cluster_coordinator.py:123] Worker /job:worker/task:1 failed
2026-11-29 04:31:30.000001: E tensorflow/core/common_runtime/eager/context.cc:1200] Failed to register function
:{"grpc_status":14}
Traceback (most recent call last):
ERROR:tensorflow:an error
"""


def test_records_and_their_continuations_go_and_the_scripts_and_pythons_lines_stay():
    assert script_lines(CHIEF_FAILING_ON_A_BAD_ROW.splitlines()) == [
        "[algo-2/worker] [dfm] worker 0: chief finished; exiting",
        "[algo-1/master] [dfm] error: bad input data in part-00000.tsv: line 1001",
        "E1129 04:31:29.956979 140000 cluster_coordinator.py:123] Worker /job:worker/task:1 failed",
        "Traceback (most recent call last):",
        "ERROR:tensorflow:an error",
    ]
