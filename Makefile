# The two commands a newcomer needs are `make demo` and `make test`; both set up .venv/ first.
VENV := .venv
PY := $(VENV)/bin/python
DFM := $(VENV)/bin/dfm
SAMPLE := data/sample

.PHONY: setup lint test test-slow test-matrix test-fast fuzz demo demo-horovod bench bench-quick bench-deps validate clean

setup:
	@bash scripts/setup.sh

# The runtimes of the other image families, built by make setup (scripts/runtime.sh).
RUNTIMES := $(or $(DFM_RUNTIMES),$(HOME)/.cache/dfm/runtimes)
# The entry-point tests, run again by each runtime's own Python: the bundled scripts on the TF of each image.
ENTRY_TESTS := tests/test_entry_*.py

# The unit tests first, on both cores (a broken rule fails CI in a minute); then the tests that start TensorFlow
# processes and the version matrix side by side: such a test keeps about one core busy on average (start-ups,
# waits), so two of them and the matrix share the two cores. Each part's output is printed when it ends.
test: test-fast
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-slow test-matrix

test-slow: setup
	$(PY) -m pytest -q -n 2 --dist loadfile -m "slow or horovod" --durations=12

# The entry-point tests marked `runtimes` (their behaviour depends on the TensorFlow version, or on what only some
# images have), again on each other image family's runtime: TF 2.12 + Horovod (Python 3.10), where Horovod (MPI
# and gloo) and Pipe mode must run, not skip; TF 2.21 (Python 3.12, Keras 3).
test-matrix: setup
	DFM_EXPECT=horovod,pipe $(RUNTIMES)/tf-2.12/bin/python -m pytest -q -p no:cacheprovider -m runtimes $(ENTRY_TESTS) --durations=8
	$(RUNTIMES)/tf-2.21/bin/python -m pytest -q -p no:cacheprovider -m runtimes $(ENTRY_TESTS) --durations=8

# The linter and formatter's check (seconds), then the unit tests only (no TensorFlow processes), on both cores.
test-fast: lint
	$(PY) -m pytest -q -n 2 -m "not slow and not horovod"

lint: setup
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/ruff check --quiet .

# Longer random spec fuzzing, for humans: a new seed each day (make test runs the same derandomized examples every time).
fuzz: setup
	DFM_FUZZ_SEED=$$(date +%Y%m%d) DFM_FUZZ_EXAMPLES=$(or $(EXAMPLES),2000) $(PY) -m pytest -q -p no:cacheprovider tests/test_fuzz_specs.py

validate: setup
	$(DFM) validate configs/*.yaml

$(SAMPLE)/.done:
	$(DFM) data synth --out $(SAMPLE) --rows 200000 --files 8 --eval-rows 40000 --seed 7
	@touch $@

# The main job on the embedded default: a 2-host parameter-server DeepFM job on the bundled sample data.
demo: setup
	@$(MAKE) --no-print-directory $(SAMPLE)/.done
	$(DFM) launch configs/ps.yaml --local
	@$(PY) -c "import json; m = json.load(open('$(SAMPLE)/meta.json')); print(f\"[demo] ceiling: the planted teacher's own eval AUC is {m['eval_teacher_auc']:.4f}, the true model; no model learns it back from {m['rows']:,} rows (make bench's quality item puts dfm beside logistic regression and DeepCTR)\")"

# configs/horovod.yaml's layout (channels train ... train-3, Pipe mode) scaled down to 2 ranks on one host.
$(SAMPLE)/split/.done: $(SAMPLE)/.done
	$(DFM) data split $(SAMPLE)/train --out $(SAMPLE)/split --hosts 2 --workers 4 --multi-path
	@touch $@

demo-horovod: setup
	@$(MAKE) --no-print-directory $(SAMPLE)/split/.done
	$(DFM) launch configs/horovod.yaml --local --set instance.count=1 \
	    --set distribution.horovod.processes_per_host=2 --set hyperparameters.log_steps=10

# DeepCTR is the reference DeepFM of the benchmark only: 0.9.3 is its last release that runs on TF 2.14's
# own Keras; --no-deps keeps pip from replacing TensorFlow.
DEEPCTR_VERSION := 0.9.3
bench-deps: setup
	@$(PY) -c "from importlib.metadata import version; assert version('deepctr') == '$(DEEPCTR_VERSION)'" 2>/dev/null \
	  || $(PY) -m pip install -q --no-deps deepctr==$(DEEPCTR_VERSION)
	@$(PY) -c "import sklearn" 2>/dev/null || $(PY) -m pip install -q scikit-learn  # the quality item's logistic regression

bench: bench-deps
	$(PY) -m bench.run

bench-quick: bench-deps
	$(PY) -m bench.run --quick

clean:
	rm -rf runs build dist *.egg-info .pytest_cache
