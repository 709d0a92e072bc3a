# Everything runs from a virtual environment made here; `make test` and `make course` work on a
# fresh machine. torch 2.13.0 (the CPU build) is installed first only where no torch is present:
# on a GPU machine, install your CUDA build of torch into the venv before `make setup`.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup check lint fmt test mutation mutation-sample course decide handout demo bench exercises translations workshop workshop-setup clean

setup: $(VENV)/.installed $(VENV)/.course-setup

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[course,test,site,exercises,dev]"
	touch $@

# the course's JupyterLab (minipipe/course/jupyter_setup.py): without nbgrader's (the teacher's) menus, without
# the news prompt, with kernels that leave a notebook's metadata as committed; written again when that changes
$(VENV)/.course-setup: $(VENV)/.installed minipipe/course/jupyter_setup.py minipipe/course/kernel.py
	$(PY) -m minipipe.course.jupyter_setup
	touch $@

# the inner loop: the linter, the formatter's check and the type checker (lint), then every test that
# starts no process and no browser; one that starts a process anyway fails, naming it (tests/support/no_processes.py)
check: setup lint
	$(PY) -m pytest -m "not distributed and not browser" --no-processes $(PYTEST_ARGS)

# ruff's lint and format check over the tree, mypy (strict) over the torch-free core: configured in
# pyproject.toml, pinned in its dev extra; `make fmt` fixes what ruff can
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# mutation testing (mutmut, configured in pyproject.toml's [tool.mutmut]) over the torch-free core and the
# exercise checkers with the quick tests: every mutant (hours on 2 cores), then the survivors by name
mutation: setup
	nice -n 10 $(VENV)/bin/mutmut run --max-children 2; $(VENV)/bin/mutmut results

# a seeded sample, MUTATION_SAMPLE mutants per area, scored per area (CI runs it: .ci/run)
MUTATION_SAMPLE ?= 4
mutation-sample: setup
	$(PY) .ci/mutation_sample.py $(MUTATION_SAMPLE)

# the teacher's workshop tools: JupyterHub (an extra), and from npm into the venv its proxy and the
# slides' reveal.js, require.js and jQuery (node and npm must be installed); tests/workshop/test_workshop_hub.py needs them
workshop-setup: $(VENV)/.workshop

$(VENV)/.workshop: $(VENV)/.installed $(VENV)/.course-setup
	$(PY) -m pip install -q -e ".[workshop]"
	npm install --prefix $(VENV) --no-fund --no-audit --loglevel=error \
		configurable-http-proxy@5 reveal.js@4 requirejs@2 jquery@3
	touch $@

# every test, every lesson and solution run once by nbval (CI: .ci/run, after `make lint`)
test: setup workshop-setup
	$(PY) -m pytest $(PYTEST_ARGS)

# JupyterHub for a room on this server: `make workshop PARTICIPANTS=20` (or NAMES=ada,alan); more
# options (a shared password, https, the port) with WORKSHOP_ARGS="--port 8000 --password ..."
PARTICIPANTS ?= 20
workshop: workshop-setup
	$(VENV)/bin/minipipe workshop start $(if $(NAMES),--names $(NAMES),--participants $(PARTICIPANTS)) $(WORKSHOP_ARGS)

# JupyterLab refuses to run as root unless told (containers, CI machines)
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

# `make course LANG=de` (or nl): the German (Dutch) edition, course/<lang>/, built from the English notebooks
# by `make translations`. Only a LANG given on the command line counts: the environment's LANG is the locale.
COURSE_LANG := $(if $(filter command line,$(origin LANG)),$(LANG),en)
course: setup
ifeq ($(COURSE_LANG),en)
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) lessons/
else ifneq ($(filter de nl,$(COURSE_LANG)),)
	LANG=C.UTF-8 MINIPIPE_LANG=$(COURSE_LANG) $(VENV)/bin/jupyter lab $(ROOT_FLAG) course/$(COURSE_LANG)/
else
	@echo "make course LANG=$(COURSE_LANG): the course is in English (make course), German (LANG=de) or Dutch (LANG=nl)"; exit 2
endif

# the track for decision makers (decide/README.md): English, or `make decide LANG=de` (nl) for its edition in
# course/<lang>/decide/ (as for `make course`, only a LANG given on the command line counts)
decide: setup
ifeq ($(COURSE_LANG),en)
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) decide/
else ifneq ($(filter de nl,$(COURSE_LANG)),)
	LANG=C.UTF-8 MINIPIPE_LANG=$(COURSE_LANG) $(VENV)/bin/jupyter lab $(ROOT_FLAG) course/$(COURSE_LANG)/decide/
else
	@echo "make decide LANG=$(COURSE_LANG): the track is in English (make decide), German (LANG=de) or Dutch (LANG=nl)"; exit 2
endif

# the track's one-page handout, HTML and PDF, in each language, in build/handout/ (PDF needs /usr/bin/chromium)
handout: setup
	$(PY) decide/handout.py --out build/handout

# the course as a website in build/site/ (site/build.py): the lessons executed, in their order; the German and
# Dutch pages in build/site/de/ and nl/, made from the same executed lessons
site: setup
	$(PY) site/build.py

demo: setup
	$(VENV)/bin/minipipe simulate --schedule 1f1b -p 4 -m 8
	$(VENV)/bin/minipipe train --schedule 1f1b -p 2 -m 4 --model gpt --steps 100

bench: setup
	$(VENV)/bin/minipipe bench

# the learner and solution notebooks, made from exercises/source/ (see exercises/README.md)
exercises: setup
	$(PY) exercises/build.py

# the German and Dutch notebooks in course/de/ and course/nl/, from the English ones and the catalogs in i18n/
# (minipipe/course/i18n/build.py says how a changed English lesson reaches them); --check: what is stale
translations: setup
	$(PY) -m minipipe.course.i18n.build

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis .ruff_cache .mypy_cache mutants
