# One command per job; each builds .venv first when it is missing or out of date.
#   make book     HTML from the stored notebook outputs (strict: warnings are errors)
#   make test     unit tests, then nbval re-runs every notebook and compares its outputs
#   make execute  re-run every notebook in place on this machine (refresh stored outputs)
#   make clean    remove the build folder and caches (keeps .venv and data/)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: book test unit nbval execute clean distclean

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	@# d2l 1.0.3 pins numpy 1.23.5 / matplotlib 3.7.2 (uninstallable on Python 3.12+): code only.
	$(PY) -m pip install -q --no-deps d2l==1.0.3
	touch $@

book: $(STAMP)
	$(VENV)/bin/jupyter-book build --all -W -n --keep-going .
	@echo "Open the book: file://$(CURDIR)/_build/html/index.html"

test: unit nbval

unit: $(STAMP)
	$(PY) -m pytest tests

nbval: $(STAMP)
	$(PY) -m pytest $(NBVAL) book

execute: $(STAMP)
	$(PY) scripts/execute_notebooks.py book/[0-9]*.ipynb

clean:
	rm -rf _build .pytest_cache book/.ipynb_checkpoints
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
