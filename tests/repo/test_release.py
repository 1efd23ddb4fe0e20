"""tools/release.py in small repositories, and a rehearsal: it tags and pushes to a
bare repository in GitHub's place, and a reader copy's first cell installs that tag.
(release.yml, which runs it, is checked in test_workflows.py.)"""
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests import chapters
from tests.repo.helpers import ROOT, find_step, load
from tools import release

GITHUB = 'https://github.com/multigpu-book/multigpu-book'
SAME = (0, 'release: v0.3.0 is tagged and the package is unchanged: nothing to release')
CHANGED = (1, 'release: the package changed since v0.3.0 without a new version: bump '
              'version in pyproject.toml')
PUSHED = 'release: tagged {} at HEAD and pushed it to origin'

# os.environ without this machine's git configuration, and with a committer
GIT_ENV = {**{k: v for k, v in os.environ.items() if not k.startswith('GIT_')},
           'GIT_CONFIG_GLOBAL': os.devnull, 'GIT_CONFIG_NOSYSTEM': '1',
           'GIT_AUTHOR_NAME': 'Test', 'GIT_AUTHOR_EMAIL': 'test@example.com',
           'GIT_COMMITTER_NAME': 'Test', 'GIT_COMMITTER_EMAIL': 'test@example.com'}
PYPROJECT = ('[project]\nname = "multigpu-book"\nversion = "0.3.0"\n'
             'dependencies = ["torch>=2.4"]\n')


def git(repo, *args):
    """git's stdout in repo; the test fails when git does."""
    done = subprocess.run(['git', '-C', str(repo), *args], env=GIT_ENV,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def run(repo, *args, env=GIT_ENV):
    """Run `python tools/release.py ARGS` in repo: (exit status, output)."""
    done = subprocess.run([sys.executable, release.__file__, *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, (done.stdout + done.stderr).strip()


def commit(repo, files=None, version=None):
    """Write files ({path: text}), set the version in pyproject.toml, commit it all."""
    for name, text in (files or {}).items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    if version:
        path = repo / 'pyproject.toml'
        path.write_text(re.sub(r'(?m)^version = ".*"$', f'version = "{version}"',
                               path.read_text()))
    git(repo, 'add', '-A')
    git(repo, 'commit', '-q', '--allow-empty', '-m', 'change')


@pytest.fixture
def repo(tmp_path):
    """A repository with a package and pyproject.toml, no tag; origin, a bare clone."""
    git(tmp_path, 'init', '-q', '-b', 'main', 'repo')
    commit(tmp_path / 'repo', {'book/data_parallel/__init__.py': '"""A package."""\n',
                               'pyproject.toml': PYPROJECT, 'README.md': '# A book\n'})
    git(tmp_path, 'clone', '-q', '--bare', 'repo', 'origin.git')
    git(tmp_path / 'repo', 'remote', 'add', 'origin', str(tmp_path / 'origin.git'))
    return tmp_path / 'repo'


@pytest.mark.parametrize('path, text, said', [
    ('README.md', '# A book, longer\n', SAME),  # not the package
    ('book/data_parallel/more.py', 'X = 1\n', CHANGED),
    # what pip installs with the code: its requirements (its [tool.setuptools] alike)
    ('pyproject.toml', PYPROJECT.replace('2.4', '2.5'), CHANGED),
], ids=['readme', 'code', 'requirements'])
def test_a_version_is_tagged_once_and_keeps_its_package(repo, path, text, said):
    assert run(repo, '--push', 'origin') == (0, PUSHED.format('v0.3.0'))
    for where in (repo, repo.parent / 'origin.git'):
        assert git(where, 'cat-file', '-t', 'v0.3.0') == 'tag'  # annotated
    commit(repo, {path: text})
    assert run(repo, '--push', 'nowhere') == said  # neither outcome tries to push
    commit(repo, version='0.3.1')
    assert run(repo, '--push', 'origin') == (0, PUSHED.format('v0.3.1'))
    assert git(repo, 'rev-parse', 'v0.3.1^{commit}') == git(repo, 'rev-parse', 'HEAD')
    assert git(repo.parent / 'origin.git', 'tag', '--list') == 'v0.3.0\nv0.3.1'


def test_release_refuses_in_one_line_that_says_why(repo, tmp_path):
    def fails(where, *args):
        status, line = run(where, *args)
        assert status == 1 and '\n' not in line and 'Traceback' not in line, line
        return line
    (tmp_path / 'empty').mkdir()
    assert fails(tmp_path / 'empty').startswith('release: not a git repository')
    assert fails(repo, '--push').startswith('usage: ')
    commit(repo)  # two commits: a clone of depth 1 lacks one
    git(tmp_path, 'clone', '-q', '--depth', '1', f'file://{repo}', 'shallow')
    assert 'shallow clone' in fails(tmp_path / 'shallow')
    assert fails(repo, '--push', 'nowhere').startswith(
        'release: could not push v0.3.0 to nowhere: ')
    assert git(repo, 'tag', '--list') == ''  # no local tag that GitHub lacks
    commit(repo, version='0.10.0')
    assert run(repo) == (
        0, 'release: tagged v0.10.0 at HEAD (not pushed: --push REMOTE pushes it)')
    commit(repo, version='0.9.9')  # older than 0.10.0 (numbers, not text)
    assert fails(repo) == ('release: version 0.9.9 is not newer than the tag v0.10.0: '
                           'bump version in pyproject.toml')
    commit(repo, version='1.0')
    assert fails(repo) == "release: pyproject.toml: version '1.0' is not X.Y.Z"
    commit(repo, {'pyproject.toml': '[project\n'})
    assert fails(repo).startswith('release: pyproject.toml in HEAD is not TOML: ')
    (repo / 'pyproject.toml').unlink()
    commit(repo)
    assert fails(repo) == 'release: no pyproject.toml in HEAD'
    assert git(repo, 'tag', '--list') == 'v0.10.0'  # no failure tagged anything


# --- The rehearsal: GitHub is a bare repository, the reader an empty environment -----

def reader_environment(tmp_path):
    """A venv without data_parallel, yet with torch and the rest of its requirements."""
    venv, shared = tmp_path / 'reader', tmp_path / 'shared'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)],
                   check=True, timeout=120)
    shared.mkdir()
    # links to this venv's packages, but not this project's metadata nor its editable
    # install (a .pth file, which the path line below would not process anyway)
    mine = re.compile(r'__editable__|multigpu_book|data_parallel|.*\.pth$')
    for entry in Path(sysconfig.get_paths()['purelib']).iterdir():
        if not mine.match(entry.name):
            (shared / entry.name).symlink_to(entry)
    site, = venv.glob('lib/python*/site-packages')
    (site / 'shared.pth').write_text(f'{shared}\n')
    return venv / 'bin' / 'python', site


# Before and after the cell: are data_parallel and torch found, which multigpu-book is
PROBE = '''
from importlib import metadata, util
print([util.find_spec(name) is not None for name in ('data_parallel', 'torch')],
      [dist.version for dist in metadata.distributions(name='multigpu-book')])
'''


@pytest.mark.slow
def test_rehearsal_a_tag_reaches_a_reader(repo, tmp_path):
    """release.py tags and pushes v<version>; a reader copy's first cell installs it."""
    names = git(ROOT, 'ls-files', '-co', '--exclude-standard', '--', 'LICENSE',
                'pyproject.toml', 'README.md', 'book/data_parallel').split()
    # what `pip install` reads, as it is here now
    commit(repo, {name: (ROOT / name).read_text() for name in names
                  if (ROOT / name).is_file()})
    github = tmp_path / 'origin.git'
    # release.yml's step, with only the committer its env names
    committer = find_step(load('release.yml'), 'run', 'tools/release.py',
                          job='tag')['env']
    env = {k: v for k, v in {**GIT_ENV, **committer}.items() if 'AUTHOR' not in k}
    version = chapters.VERSION
    assert run(repo, '--push', 'origin', env=env) == (0, PUSHED.format(f'v{version}'))
    assert git(github, 'cat-file', '-t', f'v{version}') == 'tag'
    paths = 'book/data_parallel/paths.py'  # main moves on, the tag's readers must not
    commit(repo, {paths: (repo / paths).read_text() + '# changed\n'}, version='99.0.0')
    git(repo, 'push', '-q', 'origin', 'HEAD:main')

    python, site = reader_environment(tmp_path)
    cell = chapters.code_cells(ROOT / 'notebooks' / '01_splitting_the_problem.ipynb')[0]
    reader_env = {
        **GIT_ENV, 'PYTHONNOUSERSITE': '1', 'PIP_CACHE_DIR': str(tmp_path / 'pip'),
        # the cell's https://github.com/... URL, cloned from the bare origin
        'GIT_CONFIG_COUNT': '1', 'GIT_CONFIG_KEY_0': f'url.{github}.insteadOf',
        'GIT_CONFIG_VALUE_0': GITHUB, 'PIP_DISABLE_PIP_VERSION_CHECK': '1',
        # no network: a requirement not installed already fails; build with the
        # setuptools here (pip reads PIP_NO_BUILD_ISOLATION=0 as no isolation)
        'PIP_NO_INDEX': '1', 'PIP_NO_BUILD_ISOLATION': '0'}
    for key in ('PYTHONPATH', 'MULTIGPU_BOOK_PACKAGE', 'VIRTUAL_ENV'):
        reader_env.pop(key, None)
    code = (PROBE + chapters.text(cell) + PROBE
            + '\nimport data_parallel\nprint(VERSION, data_parallel.__file__)\n')
    done = subprocess.run([str(python), '-c', code], cwd=tmp_path, env=reader_env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    before, installed, after, pinned = done.stdout.splitlines()
    assert before == '[False, True] []'
    assert after == f"[True, True] ['{version}']"  # the tag's version, not main's
    assert installed == (f'Installed the helper package data_parallel {version} from '
                         f'git+{GITHUB}@v{version}.')
    pinned, file = pinned.split()
    assert pinned == version and Path(file).is_relative_to(site), file  # not a clone
    assert not (site / 'torch').exists()  # pip took torch as installed
