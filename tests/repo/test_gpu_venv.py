"""gpu.yml keeps one venv, its Python's (gpu.md L5): a patch release of Python, which
setup-python takes, does not leave the old venv (about 6 GB) in the runner's cache. The
step's script runs here, with the cache in a temporary folder."""
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
STEP = 'Virtual environment and data outside the cleaned workspace'


def test_a_new_python_version_removes_the_other_venvs(tmp_path):
    doc = yaml.safe_load((ROOT / '.github' / 'workflows' / 'gpu.yml').read_text())
    [step] = [s for s in doc['jobs']['test-on-gpu']['steps'] if s.get('name') == STEP]
    cache = tmp_path / 'multigpu-book'
    for version in ('3.11.9', '3.11.10', '3.12.1'):
        (cache / f'venv-py{version}' / 'bin').mkdir(parents=True)
    (cache / 'data' / 'FashionMNIST').mkdir(parents=True)
    env_file = tmp_path / 'github_env'
    subprocess.run(['bash', '-euo', 'pipefail', '-c', step['run']], check=True,
                   env={'PATH': '/usr/bin:/bin', 'XDG_CACHE_HOME': str(tmp_path),
                        'PYTHON_VERSION': '3.11.10', 'GITHUB_ENV': str(env_file)})
    assert sorted(p.name for p in cache.iterdir()) == ['data', 'venv-py3.11.10']
    assert (cache / 'data' / 'FashionMNIST').is_dir()
    assert f'BOOK_VENV={cache}/venv-py3.11.10' in env_file.read_text().splitlines()
