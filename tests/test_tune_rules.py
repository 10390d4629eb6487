"""The `tune:` rules: each with a spec it accepts and one it refuses (test_rules.py runs TUNE_CASES with the
others), and the rules' view of the example config."""

from __future__ import annotations

from launcher.compile import compile_spec
from launcher.plans.tuning_plan import build_tuning_plan, grid_size
from launcher.rules.tuning_limits import check_tune_environment, check_tune_limits
from launcher.rules.tuning_objective import (
    check_tune_hyperband_resource,
    check_tune_objective,
    check_tune_objective_reported,
    objective_schedule,
)
from launcher.rules.tuning_ranges import check_tune_range_values, check_tune_ranges
from launcher.rules.tuning_search import check_tune_completion, check_tune_strategy
from launcher.rules.tuning_trials import check_tune_checkpoints, check_tune_cluster, check_tune_dropped_settings
from spec_helpers import DELETE, REPO, write_spec

OBJECTIVE = {"metric": "eval:auc", "goal": "maximize"}
LR = {"learning_rate": {"min": 0.001, "max": 0.1, "scaling": "log"}}
EVAL = {"eval": "s3://dfm-bucket/eval/"}
USER_SCRIPT = {"entry_point": "train.py", "source_dir": "s3://dfm-bucket/code/sourcedir.tar.gz"}


def tune(**changes) -> dict:
    """BASE + a tune section (and the eval channel its eval:auc objective needs)."""
    return {"data": EVAL, "tune": {"objective": OBJECTIVE, "max_jobs": 4, "ranges": LR, **changes}}


TUNE_CASES = [
    (
        check_tune_objective_reported,
        tune(),
        {**tune(), "data": {"eval": DELETE}},
        ("error", "tune.objective.metric", "report eval:auc only with an eval channel: add data.eval"),
    ),
    (
        check_tune_objective_reported,
        {**tune(early_stopping="auto"), "hyperparameters": {"eval_steps": 200}},
        tune(early_stopping="auto"),
        ("warning", "tune.early_stopping", "reports eval:auc once, at its end (epochs 1, eval_steps 0)"),
    ),
    (
        check_tune_objective_reported,
        {**tune(early_stopping="auto"), "hyperparameters": {"eval_steps": 200}},
        {**tune(early_stopping="auto"), "data": {**EVAL, "mode": "Pipe"}, "hyperparameters": {"eval_steps": 200}},
        ("warning", "tune.early_stopping", "once, at its end (the eval channel is in Pipe mode)"),
    ),
    (
        check_tune_ranges,
        tune(ranges={"embedding_size": {"min": 4, "max": 32, "type": "integer"}}),
        tune(ranges={"embedding_size": {"min": 4, "max": 32}}),
        ("error", "tune.ranges.embedding_size", "add `type: integer`"),
    ),
    (
        check_tune_ranges,
        tune(ranges={"dropout": {"min": 0.0, "max": 0.5}}),
        tune(ranges={"dropout": {"min": 0.0, "max": 1.0}}),
        ("error", "tune.ranges.dropout", "outside what deepfm-ps accepts"),
    ),
    (
        check_tune_ranges,
        tune(ranges={"optimizer": {"values": ["adam", "ftrl"]}}),
        tune(ranges={"optimizer": {"min": 1, "max": 2, "type": "integer"}}),
        ("error", "tune.ranges.optimizer", "use {values: [...]}"),
    ),
    (
        check_tune_ranges,
        tune(),
        {**tune(), "hyperparameters": {"learning_rate": 0.01}},
        ("error", "tune.ranges.learning_rate", "also fixed in hyperparameters.learning_rate"),
    ),
    (
        check_tune_ranges,
        tune(),
        {**tune(), "entry_point": "train.py", "source_dir": "s3://dfm-bucket/code/sourcedir.tar.gz"},
        ("warning", "tune.ranges.learning_rate", "dfm cannot check that train.py reads --learning_rate"),
    ),
    (
        check_tune_range_values,
        tune(),
        tune(ranges={"learning_rate": {"min": 0.0, "max": 0.1, "scaling": "log"}}),
        ("error", "tune.ranges.learning_rate.scaling", "log scaling needs min > 0"),
    ),
    (
        check_tune_range_values,
        tune(),
        tune(ranges={"learning_rate": {"min": 0.1, "max": 0.01}}),
        ("error", "tune.ranges.learning_rate", "is not below max"),
    ),
    (
        check_tune_range_values,
        tune(ranges={"batch_size": {"values": list(range(1, 31))}}),
        tune(ranges={"batch_size": {"values": list(range(1, 32))}}),
        ("error", "tune.ranges.batch_size", "31 values, SageMaker allows 30"),
    ),
    (
        check_tune_limits,
        tune(name="d" * 18),
        tune(name="d" * 19),
        ("error", "tune.name", "at most 18 characters"),
    ),
    (
        check_tune_limits,
        tune(max_parallel_jobs=4),
        tune(max_parallel_jobs=5),
        ("error", "tune.max_parallel_jobs", "use at most 4"),
    ),
    (
        check_tune_limits,
        {**tune(max_runtime_s=120), "max_run": 120},
        {**tune(max_runtime_s=119), "max_run": 100},
        ("error", "tune.max_runtime_s", "minimum 120"),
    ),
    (
        check_tune_limits,
        tune(warm_start={"type": "transfer_learning", "parents": ["a", "b", "c", "d", "e"]}),
        tune(warm_start={"type": "transfer_learning", "parents": ["a", "b", "c", "d", "e", "f"]}),
        ("error", "tune.warm_start.parents", "SageMaker allows 5"),
    ),
    (
        check_tune_objective,
        tune(),
        tune(objective={"metric": "eval:acc", "goal": "maximize"}),
        ("error", "tune.objective.metric", "did you mean 'eval:auc'"),
    ),
    (
        check_tune_strategy,
        tune(strategy="grid", max_jobs=None, ranges={"batch_size": {"values": [256, 512]}}),
        tune(strategy="grid", max_jobs=3, ranges={"batch_size": {"values": [256, 512]}}),
        ("error", "tune.max_jobs", "is 2 trials"),
    ),
    (
        check_tune_strategy,
        tune(strategy="hyperband", hyperband={"min_resource": 1, "max_resource": 9}),
        tune(strategy="hyperband", early_stopping="auto", hyperband={"min_resource": 1, "max_resource": 9}),
        ("error", "tune.early_stopping", "early_stopping: off"),
    ),
    (check_tune_strategy, tune(), tune(max_jobs=None), ("error", "tune", "max_jobs is required")),
    (
        check_tune_cluster,
        {**tune(), "instance": {"type": "ml.g5.2xlarge", "count": 2}, "distribution": "parameter_server"},
        {
            **tune(),
            "instance": {"type": "ml.g5.2xlarge", "count": 2},
            "distribution": {"parameter_server": {"ps": {"type": "ml.r5.4xlarge", "count": 1}}},
        },
        ("error", "distribution.parameter_server.ps", "no instance groups"),
    ),
    (
        check_tune_completion,
        tune(completion={"no_improvement_jobs": 3}),
        tune(completion={"no_improvement_jobs": 4}),
        ("warning", "tune.completion.no_improvement_jobs", "never stops the job early"),
    ),
    (
        check_tune_completion,
        tune(completion={"no_improvement_jobs": 3}),
        tune(completion={"no_improvement_jobs": 2}),
        ("error", "tune.completion.no_improvement_jobs", "below SageMaker's minimum 3"),
    ),
    (
        check_tune_checkpoints,
        tune(),
        {**tune(), **USER_SCRIPT},
        ("warning", "checkpoints", "unless train.py keeps each trial's checkpoints apart"),
    ),
    (
        check_tune_hyperband_resource,
        {
            **tune(strategy="hyperband", hyperband={"min_resource": 1, "max_resource": 3}),
            "hyperparameters": {"epochs": 3},
        },
        {
            **tune(strategy="hyperband", hyperband={"min_resource": 1, "max_resource": 4}),
            "hyperparameters": {"epochs": 3},
        },
        ("error", "tune.hyperband.max_resource", "prints eval:auc 3 time(s)"),
    ),
    (
        check_tune_hyperband_resource,
        {
            **tune(strategy="hyperband", hyperband={"min_resource": 1, "max_resource": 5}),
            "hyperparameters": {"epochs": 0, "max_steps": 1000, "eval_steps": 200},
        },
        {
            **tune(strategy="hyperband", hyperband={"min_resource": 1, "max_resource": 2}),
            "hyperparameters": {"epochs": 0, "max_steps": 1000, "eval_steps": 200},
        },
        ("warning", "tune.hyperband.max_resource", "before the 5 it would print"),
    ),
    (
        check_tune_hyperband_resource,
        {
            **tune(strategy="hyperband", hyperband={"min_resource": 1, "max_resource": 2}),
            "hyperparameters": {"epochs": 2},
        },
        {
            **tune(strategy="hyperband", hyperband={"min_resource": 1, "max_resource": 2}),
            "hyperparameters": {"eval_steps": 100},
        },
        ("warning", "tune.hyperband.max_resource", "cannot tell how many eval:auc lines"),
    ),
    # 100 static hyperparameters: the spec's, the SDK's 6 and the tuner's 3 (estimator class and module, objective)
    (
        check_tune_limits,
        {**tune(), **USER_SCRIPT, "hyperparameters": {f"h{i}": 1 for i in range(91)}},
        {**tune(), **USER_SCRIPT, "hyperparameters": {f"h{i}": 1 for i in range(92)}},
        ("error", "hyperparameters", "101 static hyperparameters"),
    ),
    (
        check_tune_dropped_settings,
        {**tune(), "tensorboard": False, "retry": {"max_attempts": 1}},
        {**tune(), "tensorboard": True},
        ("warning", "tensorboard", "dfm tune on SageMaker ignores tensorboard"),
    ),
    (
        check_tune_dropped_settings,
        {"tensorboard": True, "stall_timeout": 60},  # no tune: section
        {
            **tune(),
            "mlflow": {"tracking_server_arn": "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/x"},
        },
        ("warning", "mlflow", "no MlflowConfig"),
    ),
    (
        check_tune_dropped_settings,
        tune(),
        {**tune(), "recover": {"max_restarts": 1}},
        ("warning", "recover", "none is resubmitted"),
    ),
    (
        check_tune_dropped_settings,
        tune(),
        {**tune(), "stall_timeout": 600},
        ("warning", "stall_timeout", "none is stopped as stalled"),
    ),
    (
        check_tune_environment,
        {**tune(), "environment": {f"V{i}": "x" for i in range(48)}},
        {**tune(), "environment": {f"V{i}": "x" for i in range(49)}},
        ("error", "environment", "49 variables, but a tuning job's training definition takes at most 48"),
    ),
    (
        check_tune_environment,
        {"environment": {f"V{i}": "x" for i in range(50)}},  # dfm launch: up to 100
        {**tune(), "environment": {f"V{i}": "x" for i in range(50)}},
        ("error", "environment", "at most 48"),
    ),
]


def test_the_example_config_has_no_tuning_findings_and_its_plan_bounds_cost_and_time(tmp_path):
    compiled = compile_spec(str(REPO / "configs" / "tune-ps.yaml"), env={})
    assert compiled.ok, compiled.errors
    assert [w for w in compiled.warnings if "tune." in w] == []
    tplan = build_tuning_plan(
        compiled.spec, compiled.plan, schedule=objective_schedule(compiled.spec), name="deepfm-ps-261124-000000"
    )
    assert tplan.rounds == 10 and tplan.cost["max_usd"] == round(20 * compiled.plan.cost["max_usd"], 2)


def test_the_example_search_is_centred_on_the_ps_recipe():
    """configs/tune-ps.yaml searches around configs/ps.yaml's recipe: each range holds ps.yaml's value (so the
    recipe is a point of the search) and what it fixes (optimizer, epochs) is ps.yaml's."""
    from launcher.facts import contract
    from launcher.local import tune_search

    example = compile_spec(str(REPO / "configs" / "tune-ps.yaml"), env={})
    recipe = compile_spec(str(REPO / "configs" / "ps.yaml"), env={})
    tplan = build_tuning_plan(example.spec, example.plan, schedule=objective_schedule(example.spec), name="t")
    ps_values = {**contract.bundled_hparams().DEFAULTS, **recipe.spec.hyperparameters}
    assert tune_search.baseline(tplan, ps_values) is not None, [(r.name, ps_values.get(r.name)) for r in tplan.ranges]
    fixed = example.spec.hyperparameters
    assert {k: fixed[k] for k in ("optimizer", "epochs")} == {k: ps_values[k] for k in ("optimizer", "epochs")}


def test_grid_size_is_the_product_of_the_value_counts(tmp_path):
    path = write_spec(
        tmp_path,
        tune(
            strategy="grid",
            max_jobs=None,
            ranges={"batch_size": {"values": [256, 512, 1024]}, "optimizer": {"values": ["adam", "adagrad"]}},
        ),
    )
    compiled = compile_spec(path, env={})
    assert compiled.ok, compiled.errors
    assert grid_size(compiled.spec.tune) == 6


def test_each_tuning_trial_of_a_bundled_script_checkpoints_in_its_own_folder(tmp_path, monkeypatch):
    """SageMaker syncs one checkpoint location to every trial: without a folder per trial, a trial restored
    the previous trial's checkpoint (of another embedding_size: a crash; of the same shape: its weights and
    step). A job that is not a tuning trial keeps the location as given (a new job may resume from it)."""
    import entry_support as es
    import deepfm_checkpoint
    import deepfm_container
    import deepfm_hparams

    hp = deepfm_hparams.parse_hyperparameters(["--checkpoint_dir", "/opt/ml/checkpoints"])
    folders = []
    for trial in ("deepfm-ps-261124-1200-001-a1b2c3d4", "deepfm-ps-261124-1200-002-e5f6a7b8"):
        environ = es.make_container(
            tmp_path / trial, ["train"], hyperparameters={"_tuning_objective_metric": "eval:auc"}
        )
        environ["TRAINING_JOB_NAME"] = trial
        folders.append(deepfm_checkpoint.checkpoint_dir(hp, deepfm_container.load_env(environ)))
    assert folders == [
        "/opt/ml/checkpoints/deepfm-ps-261124-1200-001-a1b2c3d4",
        "/opt/ml/checkpoints/deepfm-ps-261124-1200-002-e5f6a7b8",
    ]
    plain = es.make_container(tmp_path / "plain", ["train"])
    plain["TRAINING_JOB_NAME"] = "deepfm-ps-261124-1200"
    assert deepfm_checkpoint.checkpoint_dir(hp, deepfm_container.load_env(plain)) == "/opt/ml/checkpoints"
