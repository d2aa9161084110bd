# The two commands: `make demo` (the main job) and `make test` (the test suite); `make docs` builds the docs site.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install bench docs clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/vqwae demo --out runs/demo

# Two workers (the machines have 2 cores); each test file runs whole on one worker, so a module's fixture (the
# reproduction's smoke run) is built once. `$(PY) -m pytest -q tests/FILE.py` runs one file serially.
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile

docs: $(STAMP)
	$(PY) -m pip install --quiet -e ".[docs]"
	$(VENV)/bin/mkdocs build --strict --site-dir build/site
	@echo "the site: build/site/index.html (or: $(VENV)/bin/mkdocs serve)"

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/step_time.py

clean:
	rm -rf runs/demo .pytest_cache
