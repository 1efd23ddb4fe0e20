"""Where things live: the repository (in a checkout), the data and the results."""
import os
from pathlib import Path

DATA_ENV = 'MULTIGPU_DATA'
"""Environment variable naming the folder that holds ``FashionMNIST/raw/``."""


def repo_root():
    """The repository's root when this package runs from a checkout, else None."""
    root = Path(__file__).resolve().parents[2]  # <root>/book/data_parallel/paths.py
    return root if (root / '_toc.yml').is_file() else None


def work_dir():
    """Where jobs run and write results: the repository's root, else the cwd."""
    return repo_root() or Path.cwd()


def data_root():
    """The data folder: $MULTIGPU_DATA if set, else data/ in the work folder."""
    # absolute: a notebook's kernel runs in book/, the jobs it starts in the work folder
    return Path(os.environ.get(DATA_ENV) or work_dir() / 'data').absolute()


def results_dir():
    """Folder (git-ignored) where a chapter leaves results that a later one compares."""
    return work_dir() / 'results'
