# One command per job; each builds .venv first when it is missing or out of date.
#   make book       HTML from the stored notebook outputs (strict: warnings are errors)
#   make test       what must be true: every test (pytest tests) and every chapter re-run
#                   by nbval, its outputs compared; nothing in it times the machine
#   make unit       the fast tests only (not marked slow), for the inner loop of a change
#   make nbval      the chapters alone, as make test runs them
#   make speed      what should be fast: the text's speed claims, on a quiet machine
#   make benchmark  the same tables, printed, failing on nothing
#   make mutations  plant each bug the book names in a copy (tests/mutations/): its unit
#                   tests or, if they miss it, its chapters' checks must fail, and pass
#                   without it
#   make browser-check  build the book and check every page in headless Chromium
#   make pdf        the whole book as one PDF, _build/pdf/book.pdf (headless Chromium)
#   make gpu-check  on a GPU machine: the CUDA paths, chapters 1-6, the DDP jobs, and
#                   chapters 9, 11, 12's jobs on NCCL (2 GPUs or more)
#   make execute    re-run every notebook in place here (refresh the stored outputs)
#   make lab        JupyterLab on the reader copies, to run the chapters yourself
#   make reader-copies  rewrite notebooks/, the chapters as Colab and a download give them
#   make logo, make figures  redraw book/logo.svg and the intro's figure
#   make clean      remove the build folder and caches (keeps .venv and data/)
# .venv is built with $(PYTHON), which must be Python 3.11 or newer (the pins in
# requirements.txt need it): `make PYTHON=python3.12 test` picks another one.
PYTHON ?= python3
# TORCH_INDEX=https://download.pytorch.org/whl/cpu: PyTorch's CPU-only wheels (about
# 200 MB, not the CUDA build's 6 GB), installed first; their 2.14.1+cpu satisfies the
# pins of requirements.txt, so pip keeps them (CI and the Pages build, which need no GPU)
TORCH_INDEX ?=
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# A cell that hangs fails after 40 minutes. Chapter 6's ten-epoch runs take 2 minutes
# each alone, 7 to 10 in make test, and more than 15 on a machine loaded eightfold
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
          --nbval-cell-timeout=2400
# Tests and chapters run JOBS at a time (pytest-xdist; each file whole on one worker, so
# its cells stay in order on one kernel; no chapter reads another's results, so in any
# order). JOBS=1: one at a time. Three on two cores: a file that waits (on a wire, a
# process starting) leaves its core to others.
JOBS   ?= 3
XDIST  := $(if $(filter-out 0 1,$(JOBS)),-n $(JOBS) --dist loadfile)
CHAPTERS := $(sort $(wildcard book/[0-9][0-9]_*.ipynb))

.PHONY: book test unit nbval speed benchmark mutations browser-check pdf gpu-check \
        execute lab reader-copies logo figures slurm chromium mathjax clean distclean

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  v=$$($(PYTHON) -V 2>/dev/null) || v='not found'; echo "$(PYTHON): $$v; the \
	book needs Python 3.11 or newer: make PYTHON=python3.12 $(MAKECMDGOALS)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(if $(TORCH_INDEX),$(PY) -m pip install -q --index-url $(TORCH_INDEX) \
	  $$(grep -E '^torch(vision)?==' requirements.txt))
	$(PY) -m pip install -q -r requirements.txt
	@# the helper package every chapter imports as dp, editable: book/data_parallel/
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

book: $(STAMP)
	$(VENV)/bin/jupyter-book build --all -W -n --keep-going .
	@echo "Open the book: file://$(CURDIR)/_build/html/index.html"

# --durations: the slowest tests and cells, so that a slow CI run shows what got slower.
# The files in the order tests/book/conftest.py gives them: the longest first.
test: $(STAMP)
	$(PY) -m pytest $(XDIST) $(if $(XDIST),--no-loadscope-reorder) $(NBVAL) \
	  --durations=15 tests $(CHAPTERS)

unit: $(STAMP)
	$(PY) -m pytest -m "not slow" tests

nbval: $(STAMP)
	$(PY) -m pytest $(XDIST) $(NBVAL) --durations=10 $(CHAPTERS)

# The speed-ups, bandwidths, overlap and cost models the text claims, each held to its
# tolerance (tools/speed.py: chapters 6 to 8, then chapter 10 on a throttled loopback;
# about 6 minutes on 2 cores). Run it on a machine it has to itself: anything beside it
# slows one side of a ratio. Also the check before `make execute` stores new outputs.
speed: $(STAMP)
	$(PY) -m tools.speed --check

execute: $(STAMP)
	$(PY) tools/execute_notebooks.py book/[0-9]*.ipynb

# The chapters without MyST, for Colab, a download and JupyterLab (glued numbers filled in,
# solutions as collapsed boxes); tests/book/test_reader_copies.py checks they are current.
reader-copies: $(STAMP)
	$(PY) tools/reader_copies.py

# JupyterLab prints the URL to open (with its token) once it listens; Ctrl-C stops it.
# (Jupyter refuses to run as root without --allow-root: containers and CI run as root.)
# It opens the reader copies (notebooks/); `make lab LAB_DIR=book` opens the sources.
LAB_PORT ?= 8888
LAB_DIR  ?= notebooks
LAB_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --no-browser --port=$(LAB_PORT) --notebook-dir=$(LAB_DIR) $(LAB_ROOT)

clean:
	rm -rf _build .pytest_cache book/.ipynb_checkpoints
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)

# ---- The book as a reader sees it ------------------------------------------------------
# MathJax 3 comes from the npm package pinned in package-lock.json, copied into the
# git-ignored _vendor/mathjax and published as _static/mathjax, so math renders offline.
# Chromium comes from Debian (chromium + chromium-driver), installed when missing, with a
# CJK font for the Chinese page (book/zh.md), which is boxes without one: the small
# fonts-wqy-microhei (1.6 MB download, 5.3 MB installed; fonts-noto-cjk: 57, 93 MB).
CHROMIUM     ?= /usr/bin/chromium
CHROMEDRIVER ?= /usr/bin/chromedriver
CJK_FONT     ?= /usr/share/fonts/truetype/wqy/wqy-microhei.ttc
SUDO         := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
MATHJAX      := _vendor/mathjax/tex-chtml.js

book mathjax: $(MATHJAX)

$(MATHJAX): package.json package-lock.json
	npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	rm -rf _vendor/mathjax && mkdir -p _vendor/mathjax
	@# The TeX-to-HTML combined component, the extensions and fonts it loads on demand,
	@# and the accessibility parts its menu can switch on (about 6 MB of the package's 24).
	tar -C node_modules/mathjax/es5 -cf - tex-chtml.js input/tex output/chtml a11y sre ui \
	  | tar -C _vendor/mathjax -xf -
	cp node_modules/mathjax/LICENSE _vendor/mathjax/
	touch $@

chromium: $(CHROMIUM) $(CHROMEDRIVER) $(CJK_FONT)

# one rule for the files (&:, a grouped target): with two, make -j runs apt-get twice at
# once when both are missing, and the second fails on apt's lock (CI's setup, measured);
# it installs only the missing ones (CI brings its own Chrome, not the font)
$(CHROMIUM) $(CHROMEDRIVER) $(CJK_FONT) &:
	$(SUDO) apt-get update -q
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	  $(if $(wildcard $(CHROMIUM)),,chromium) $(if $(wildcard $(CHROMEDRIVER)),,chromium-driver) \
	  $(if $(wildcard $(CJK_FONT)),,fonts-wqy-microhei)

# Pages are independent and wait on Chromium more than on the cores: BROWSERS of them
# open at a time, one page after another (--dist load), more browsers than cores.
BROWSERS ?= 4
browser-check: book chromium
	CHROMIUM=$(CHROMIUM) CHROMEDRIVER=$(CHROMEDRIVER) $(PY) -m pytest \
	  $(if $(filter-out 0 1,$(BROWSERS)),-n $(BROWSERS) --dist load) \
	  --ignore=tests/browser/test_pdf.py tests/browser

logo:
	$(PYTHON) tools/make_logo.py book/logo.svg

# SLURM for the local two-node cluster of tests/jobs/test_slurm.py (data_parallel.slurm):
# Debian's slurm-wlm and munge (about 20 MB), installed when missing. Its own apt-get,
# run after the setup's (.ci/run): two at once fail on apt's lock. System packages: they
# leave /etc/munge/munge.key and (with systemd) munge.service enabled; undo it with
# `apt purge slurm-wlm munge`.
SLURMCTLD ?= /usr/sbin/slurmctld
slurm: $(SLURMCTLD)

$(SLURMCTLD):
	$(SUDO) apt-get update -q
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	  slurm-wlm munge

# The intro's figure, drawn by code (tests/unit/test_figures.py checks it is up to date).
figures: $(STAMP)
	$(PY) -c "import data_parallel as dp; dp.write_book_figures('book')"

# The whole book as one PDF: Sphinx's single page (strict, as make book), printed on A4
# by the browser check's Chromium once MathJax has typeset it (tools/make_pdf.py), then
# read back by tests/browser/test_pdf.py. pages.yml publishes it beside the HTML.
pdf: $(STAMP) $(MATHJAX) chromium
	$(VENV)/bin/jupyter-book build --all -W -n --keep-going --builder singlehtml .
	CHROMIUM=$(CHROMIUM) CHROMEDRIVER=$(CHROMEDRIVER) $(PY) -m tools.make_pdf
	$(PY) -m pytest -q tests/browser/test_pdf.py

benchmark: $(STAMP)
	$(PY) -m tools.speed

gpu-check: $(STAMP)
	$(PY) tools/gpu_check.py $(GPU_CHECK_ARGS)

# Prints the matrix of what caught what; about 10 minutes on 2 CPU cores.
mutations: $(STAMP)
	JOBS=$(JOBS) MULTIGPU_MUTATIONS=1 $(PY) -m pytest -v -m matrix tests/mutations/test_mutations.py
