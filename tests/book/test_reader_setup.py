"""What a reader meets before the first chapter: `make` on a Python that is too old says
so in one line, before it builds anything (issue 24: the pins need Python 3.11+)."""
import os
import shutil
import subprocess

import pytest

from tests.chapters import ROOT


def fake_python(folder, version):
    """A `python` that reports version and whose -c exits as that version's would."""
    major, minor = map(int, version.split('.')[:2])
    script = folder / f'python{major}.{minor}'
    script.write_text(f"""#!/bin/sh
case "$1" in
  -V) echo "Python {version}" ;;
  -c) exit {1 if (major, minor) < (3, 11) else 0} ;;
  *) echo "venv would be built now" >&2; exit 3 ;;
esac
""")
    script.chmod(0o755)
    return script


def make(tmp_path, python):
    """`make unit` in a copy of the Makefile whose .venv is missing."""
    shutil.copy(ROOT / 'Makefile', tmp_path / 'Makefile')
    for name in ('requirements.txt', 'pyproject.toml'):
        (tmp_path / name).write_text('')
    env = {k: v for k, v in os.environ.items() if not k.startswith('MAKE')}
    return subprocess.run(['make', '-s', 'unit', f'PYTHON={python}'], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize('python', ['3.10.13', 'missing'])
def test_make_on_an_old_or_missing_python_says_what_to_do(tmp_path, python):
    exe = fake_python(tmp_path, python) if python != 'missing' else 'no-such-python3'
    result = make(tmp_path, exe)
    assert result.returncode != 0
    ours = [line for line in result.stderr.splitlines() if not line.startswith('make')]
    assert len(ours) == 1, result.stderr
    assert 'Python 3.11 or newer' in ours[0]
    assert 'make PYTHON=python3.12 unit' in ours[0]
    assert (python if python != 'missing' else 'not found') in ours[0]
    assert not (tmp_path / '.venv').exists()  # nothing built


def test_make_on_a_new_python_goes_on_to_build_the_venv(tmp_path):
    result = make(tmp_path, fake_python(tmp_path, '3.12.1'))
    assert 'venv would be built now' in result.stderr  # past the check
    assert 'Python 3.11 or newer' not in result.stderr
