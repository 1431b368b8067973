# transtune: the two set-up commands are `make demo` and `make test`; both install first.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-slow lint lock library bench-zoo clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# Transfer-tune ResNeXt-50, which the shipped library was not tuned on, from a copy of it, in
# NHWC with prepacked weights (the ceiling's lowering); the pre-trained cost model (which
# never saw ResNeXt) ranks the sampled programs, and picks which donor schedules to measure
# on a CPU it was trained on (elsewhere all are measured).
demo: setup
	mkdir -p runs && cp data/library/zoo-host.db runs/demo-library.db
	$(VENV)/bin/transtune transfer resnext50_32x4d --library runs/demo-library.db \
		--layout NHWC --prepack --max-candidates 4 --repeat 3 \
		--cost-model data/costmodel/attention-by-model.json

test: setup
	$(PY) -m pytest -q

test-slow: setup
	$(PY) -m pytest -q -m slow

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

# The shipped library regenerated on this host's CPU (its hardware id): MINUTES more of the
# resumable reference queue (benchmarks/reference.py), then its best records merged into
# data/library/zoo-host.db. Repeat until reference.py report shows every model finished.
# NEW_CLASSES=1: only the kernels of classes this CPU's libraries lack (the zoo covered first).
MINUTES ?= 60
library: setup
	$(PY) benchmarks/reference.py run --minutes $(MINUTES) $(if $(NEW_CLASSES),--new-classes)
	$(PY) benchmarks/transfer.py library

bench-zoo: setup
	$(PY) benchmarks/zoo.py

# Refresh constraints.txt from the current environment (after changing a dependency).
lock: setup
	{ sed -n '1,2p' constraints.txt; $(PY) -m pip freeze --exclude-editable | sed 's/+cpu$$//'; } > constraints.new
	mv constraints.new constraints.txt

clean:
	rm -rf $(VENV) build src/*.egg-info
