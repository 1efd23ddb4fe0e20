"""The helper package: installed, not put on a path; every chapter runs on its own.

A reader who opens a chapter in Colab or downloads it gets the notebook alone. Its first
cell installs the package when it is missing; these tests build the wheel, install it
into an empty place and run chapters 1-5 alone in empty folders, offline.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

import data_parallel as dp
from data_parallel.launch import free_port

ROOT = dp.repo_root()
CHAPTERS = sorted((ROOT / 'book').glob('[0-9][0-9]_*.ipynb'))
SYS_PATH = 'sys' + '.path'  # spelled apart, so that this file does not find itself
PARENTS = 'parents' + '['


def code_cells(notebook):
    return [c for c in json.loads(notebook.read_text())['cells'] if c['cell_type'] == 'code']


def test_nothing_edits_the_import_path():
    files = [*ROOT.glob('book/**/*.py'), *ROOT.glob('tools/*.py'), *ROOT.glob('tests/**/*.py')]
    found = [f'{path.relative_to(ROOT)}' for path in files if SYS_PATH in path.read_text()]
    found += [nb.name for nb in CHAPTERS
              if any(SYS_PATH in ''.join(c['source']) for c in code_cells(nb))]
    assert found == [], f'{SYS_PATH} edits: import the installed package instead'


def test_one_definition_of_the_repository_root():
    files = [*ROOT.glob('book/data_parallel/*.py'), *ROOT.glob('tools/*.py'),
             *ROOT.glob('tests/*.py')]
    derived = [path.name for path in files if PARENTS in path.read_text()]
    assert derived == ['paths.py'], 'use dp.repo_root() / dp.work_dir() / dp.data_root()'


def test_package_is_installed_not_found_by_accident():
    import importlib.metadata
    assert importlib.metadata.version('multigpu-book')
    assert Path(dp.__file__).resolve().parent == ROOT / 'book' / 'data_parallel'


def bootstrap_cell(notebook):
    """The first code cell of a chapter: it installs the package when it is missing."""
    return code_cells(notebook)[0]


def test_every_chapter_starts_with_the_same_install_cell():
    first = [bootstrap_cell(nb) for nb in CHAPTERS]
    sources = {''.join(cell['source']) for cell in first}
    assert len(sources) == 1, 'the install cells differ: make them identical'
    assert all(cell['metadata'].get('tags') == ['remove-cell'] for cell in first)
    source, = sources
    url = yaml.safe_load((ROOT / '_config.yml').read_text())['repository']['url']
    assert f"'git+{url}'" in source, 'installs from the repository in _config.yml'
    assert source.index('find_spec') < source.index('pip')  # only when it is missing
    assert all(len(line) <= 88 for line in source.splitlines())


@pytest.fixture(scope='session')
def wheel(tmp_path_factory):
    """A wheel of the project, built offline."""
    out = tmp_path_factory.mktemp('wheel')
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation',
                    '-q', '-w', str(out), str(ROOT)], check=True, timeout=300)
    built, = out.glob('multigpu_book-*.whl')
    return built


@pytest.fixture(scope='session')
def site(tmp_path_factory, wheel):
    """The wheel installed into an empty folder (torch and friends come from .venv)."""
    target = tmp_path_factory.mktemp('site')
    subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-deps', '-q', '--target',
                    str(target), str(wheel)], check=True, timeout=300)
    assert (target / 'data_parallel' / 'train_ddp.py').exists()
    return target


@pytest.mark.slow
def test_install_cell_installs_the_package_once(tmp_path, wheel):
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True, timeout=300)
    python = venv / 'bin' / 'python'
    env = {**os.environ, 'MULTIGPU_BOOK_PACKAGE': str(wheel), 'PIP_NO_DEPS': '1',
           'PIP_NO_INDEX': '1', 'PIP_DISABLE_PIP_VERSION_CHECK': '1'}
    env.pop('PYTHONPATH', None)
    code = ''.join(bootstrap_cell(CHAPTERS[0])['source'])
    code += "\nprint('found:', importlib.util.find_spec('data_parallel') is not None)"
    run = lambda: subprocess.run([str(python), '-c', code], env=env, cwd=tmp_path,
                                 capture_output=True, text=True, timeout=300)
    first, second = run(), run()
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        f'Installed the helper package data_parallel from {wheel}.', 'found: True']
    assert second.stdout.splitlines() == ['found: True'], 'the second run installs nothing'


@pytest.mark.slow
@pytest.mark.parametrize('chapter', CHAPTERS[:5], ids=[nb.name for nb in CHAPTERS[:5]])
def test_chapter_runs_alone_in_an_empty_folder(tmp_path, site, fashion_root, chapter):
    nb = json.loads(chapter.read_text())
    nb['cells'].append({'cell_type': 'code', 'execution_count': None, 'id': 'where',
                        'metadata': {}, 'outputs': [],
                        'source': 'import data_parallel\nprint(data_parallel.__file__)'})
    alone = tmp_path / 'alone' / chapter.name
    alone.parent.mkdir()
    alone.write_text(json.dumps(nb))
    env = {**os.environ, 'PYTHONPATH': str(site), 'MULTIGPU_DATA': str(fashion_root)}
    result = subprocess.run([sys.executable, str(ROOT / 'tools' / 'execute_notebooks.py'),
                             str(alone)], env=env, capture_output=True, text=True,
                            timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    executed = json.loads(alone.read_text())['cells'][-1]['outputs'][0]['text']
    assert ''.join(executed).strip() == str(site / 'data_parallel' / '__init__.py')
    assert sorted(p.name for p in alone.parent.iterdir()) == [chapter.name], \
        'a chapter leaves no files beside itself'


@pytest.mark.slow
def test_make_lab_starts_jupyterlab_on_the_book(tmp_path):
    port, token = free_port(), 'test-token-123'
    env = {**os.environ, 'JUPYTER_TOKEN': token, 'JUPYTER_RUNTIME_DIR': str(tmp_path)}
    log = tmp_path / 'lab.log'
    with open(log, 'w') as out:
        # -o: use .venv as it is, even when requirements.txt is newer
        lab = subprocess.Popen(['make', '-s', '-o', '.venv/.installed', 'lab',
                                f'LAB_PORT={port}'], cwd=ROOT, env=env, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        status = None
        deadline = time.monotonic() + 90
        while status is None and time.monotonic() < deadline:
            try:
                url = f'http://127.0.0.1:{port}/api/status?token={token}'
                with urllib.request.urlopen(url, timeout=5) as response:
                    status = json.loads(response.read())
            except OSError:
                assert lab.poll() is None, log.read_text()
                time.sleep(1)
        assert status is not None and 'started' in status, log.read_text()
        url = f'http://127.0.0.1:{port}/api/contents?token={token}'
        with urllib.request.urlopen(url, timeout=10) as response:
            names = {item['name'] for item in json.loads(response.read())['content']}
        assert {nb.name for nb in CHAPTERS} <= names  # it serves the book's folder
        assert re.search(rf'http://\S+:{port}/lab\?token=', log.read_text())  # the URL
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)
    with socket.socket() as s:  # the port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(('127.0.0.1', port))
