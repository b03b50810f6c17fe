# Two commands do all the set-up on a fresh machine:
#   make run    create .venv if missing, install, run the course's main job
#   make test   create .venv if missing, install, run the test suite (about 11 minutes on
#               2 cores; test-class and test-seeds hold the long rest, and CI runs all three)
VENV   ?= .venv
PYTHON ?= python3
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: run test test-quick test-class test-seeds bench mutate release clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/nndebug clinic

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q -m "not seeds and not classwide"

test-quick: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q -m "not slow"

test-class: $(STAMP)  # two simulated classes graded end to end, nbgrader and nndebug grade
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q -m "classwide and not seeds"

test-seeds: $(STAMP)  # every catalogue case on 8 unseen seeds, and the hiders on hidden seeds
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q -m seeds

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# mutation testing of the modules that decide (benchmarks/mutate.py; hours on 2 cores):
#   make mutate MODULE=lesson/debugger/rules.py SAMPLE=200    one module, 200 mutants
mutate: $(STAMP)
	$(BIN)/python -c "import cosmic_ray" 2>/dev/null || \
		$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[mutation]"
	OMP_NUM_THREADS=1 nice -n 10 $(BIN)/python benchmarks/mutate.py $(MODULE) \
		$(if $(SAMPLE),--sample $(SAMPLE)) $(MUTATE_ARGS)

release: $(STAMP)  # instructors: regenerate exercises/ from solutions/
	PATH=$(BIN):$$PATH $(BIN)/nbgrader generate_assignment "*" --force

clean:
	rm -rf $(VENV) build *.egg-info
