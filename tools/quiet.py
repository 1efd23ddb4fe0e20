"""Run a command as one shared holder of make test's lock (conftest.py).

    python tools/quiet.py COMMAND [ARG ...]

Inside make test's lanes (MULTIGPU_QUIET_LOCK set) a step that is not a pytest item,
such as the browser check's book build, holds the lock shared while it runs, like
every test and cell: a cell that measures time then waits for it to end instead of
timing beside it. Unset, the command just runs. Exits with the command's code.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path


def root_conftest():
    """The repository's conftest.py, which owns the lock (holding, LOCK_ENV)."""
    path = Path(__file__).resolve().parent.parent / 'conftest.py'
    spec = importlib.util.spec_from_file_location('root_conftest', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv):
    if not argv:
        print('usage: python tools/quiet.py COMMAND [ARG ...]', file=sys.stderr)
        return 2
    lanes = root_conftest()
    path = os.environ.get(lanes.LOCK_ENV)
    env = {**os.environ, lanes.LOCK_ENV: ''}  # what it starts takes no lock of its own
    try:
        if not path:
            return subprocess.call(argv)
        with lanes.holding(path, alone=False):
            return subprocess.call(argv, env=env)
    except OSError as error:  # no such program, not executable
        print(f'tools/quiet.py: cannot run {argv[0]}: {error.strerror}',
              file=sys.stderr)
        return 127


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
