"""The progress line and summary read the entry points' metric lines (the format in launcher/facts/contract.py)."""

import re

from launcher.facts.conventions import METRIC_DEFINITIONS
from launcher.metric_lines import Progress, parse_metric_line


def test_metric_lines_parse_like_the_sagemaker_metric_definitions():
    line = "[dfm] train step=120 loss=0.4512 auc=0.7012 examples_per_sec=15300.5"
    kind, values = parse_metric_line("INFO " + line)
    assert kind == "train" and values == {"step": 120, "loss": 0.4512, "auc": 0.7012, "examples_per_sec": 15300.5}
    scraped = {
        d["Name"]: float(re.search(d["Regex"], line).group(1))
        for d in METRIC_DEFINITIONS
        if d["Name"].startswith("train:")
    }
    assert scraped == {"train:" + k: v for k, v in values.items()}
    assert parse_metric_line("[dfm] tuning intra_op_threads=1") is None


def test_progress_sums_speed_over_processes_and_keeps_the_last_eval():
    progress = Progress()
    progress.feed("algo-1/rank0", "[dfm] train step=10 loss=0.6 auc=0.5 examples_per_sec=1000")
    progress.feed("algo-1/rank1", "[dfm] train step=10 loss=0.7 auc=0.5 examples_per_sec=3000")
    progress.feed("algo-1/rank0", "[dfm] train step=20 loss=0.5 auc=0.6 examples_per_sec=2000")
    progress.feed("algo-1/rank0", "[dfm] eval step=20 loss=0.45 auc=0.71")
    progress.feed("algo-1/rank0", "[dfm] exported /tmp/model/123")
    assert progress.step == 20 and progress.examples_per_sec == 5000
    assert progress.mean_examples_per_sec == 1500 + 3000
    assert progress.eval == {"loss": 0.45, "auc": 0.71} and progress.exported == ["/tmp/model/123"]
    assert "step 20" in progress.line() and "eval loss 0.4500 auc 0.7100" in progress.line()


def test_the_last_finite_train_loss_survives_a_diverged_line():
    progress = Progress()
    assert progress.last_train_loss() is None
    progress.feed("algo-1/master", "[dfm] train step=5 loss=0.61 auc=0.55 examples_per_sec=900")
    progress.feed("algo-1/master", "[dfm] eval step=5 loss=0.6 auc=0.6")
    progress.feed("algo-1/master", "[dfm] train step=10 loss=nan auc=0.5 examples_per_sec=950")
    assert progress.last_train_loss() == (5, 0.61)
