"""One way a version reaches readers: tools/release.py and release.yml.

The version in pyproject.toml is the release; release.yml runs tools/release.py when
ci passes on main, which tags v<version> (and pushes the tag) or fails when the package
changed since that tag without a new version. Here: the workflow's promises (checked on
the parsed YAML, and each check fails on a copy broken on purpose), release.py's
outcomes in small repositories, and a rehearsal: a bare repository stands in for
GitHub, release.py tags and pushes, and a reader copy's first cell installs the package
from that tag into an environment that lacks it.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
import yaml

import data_parallel as dp

ROOT = dp.repo_root()
WORKFLOW = ROOT / '.github' / 'workflows' / 'release.yml'
RELEASE = ROOT / 'tools' / 'release.py'
GITHUB = 'https://github.com/multigpu-book/multigpu-book'
CHANGED = ('release: the package changed since v0.3.0 without a new version: bump '
           'version in pyproject.toml')


def load(path=WORKFLOW):
    """Parse a workflow file; PyYAML reads the key `on` as True, so map it back."""
    doc = yaml.safe_load(path.read_text())
    doc['on'] = doc.pop(True, doc.get('on'))
    return doc


def the_step(doc, action):
    """The one step of the job that uses action (owner/name, any version)."""
    job, = doc['jobs'].values()
    found = [s for s in job['steps'] if s.get('uses', '').split('@')[0] == action]
    assert len(found) == 1, f'release.yml uses {action} {len(found)} times'
    return found[0]


def release_step(doc):
    job, = doc['jobs'].values()
    step, = [s for s in job['steps'] if 'tools/release.py' in s.get('run', '')]
    return step


def check_release_workflow(doc):
    """After ci passes on a push to main, with the tags, it runs release.py --push."""
    trigger = doc['on']
    assert set(trigger) == {'workflow_run'}, set(trigger)
    assert trigger['workflow_run'] == {'workflows': ['ci'], 'types': ['completed'],
                                       'branches': ['main']}, trigger
    assert load(ROOT / '.github' / 'workflows' / 'ci.yml')['name'] == 'ci'
    assert doc['permissions'] == {'contents': 'write'}  # the tag, nothing more
    job, = doc['jobs'].values()
    condition = ' '.join(job['if'].split())
    for needed in ("github.event.workflow_run.conclusion == 'success'",
                   "github.event.workflow_run.event == 'push'"):
        assert needed in condition, condition
    assert job['timeout-minutes'] > 0
    checkout = the_step(doc, 'actions/checkout')
    assert checkout['uses'] == 'actions/checkout@v4'  # pinned like ci.yml
    assert checkout['with']['ref'] == '${{ github.event.workflow_run.head_sha }}'
    assert checkout['with']['fetch-depth'] == 0 and checkout['with']['fetch-tags']
    python = the_step(doc, 'actions/setup-python')
    assert python['uses'] == 'actions/setup-python@v5'
    assert python['with']['python-version'] == '3.11'
    step = release_step(doc)
    assert step['run'] == 'python tools/release.py --push origin'
    assert {'GIT_COMMITTER_NAME', 'GIT_COMMITTER_EMAIL'} <= set(step.get('env', {}))
    steps = job['steps']
    assert steps.index(checkout) < steps.index(python) < steps.index(step)


def test_release_workflow_tags_after_the_tests_pass_on_main():
    check_release_workflow(load())


MUTATIONS = {
    'on every push': lambda d: d.update(on={'push': None}),
    'after any workflow': lambda d: d['on']['workflow_run'].update(workflows=['pages']),
    'from any branch': lambda d: d['on']['workflow_run'].pop('branches'),
    'even when ci failed': lambda d: d['jobs']['tag'].update(
        {'if': "github.event.workflow_run.event == 'push'"}),
    'read-only': lambda d: d.update(permissions={'contents': 'read'}),
    'more rights': lambda d: d['permissions'].update({'pull-requests': 'write'}),
    'the branch, not the tested commit': lambda d: the_step(
        d, 'actions/checkout')['with'].pop('ref'),
    'no tags': lambda d: the_step(d, 'actions/checkout')['with'].update(
        {'fetch-depth': 1}),
    'tags locally only': lambda d: release_step(d).update(
        run='python tools/release.py'),
    'checkout by a moving name': lambda d: the_step(d, 'actions/checkout').update(
        uses='actions/checkout@main'),
    'no tagger': lambda d: release_step(d).pop('env'),
}


@pytest.mark.parametrize('name', MUTATIONS)
def test_release_workflow_check_fails_on_a_broken_copy(name):
    doc = load()
    MUTATIONS[name](doc)
    with pytest.raises((AssertionError, KeyError, TypeError, ValueError)):
        check_release_workflow(doc)


# --- tools/release.py in small repositories ------------------------------------------

def git_env(**more):
    """os.environ with git's configuration of this machine left out, and a committer."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith('GIT_')}
    return {**env, 'GIT_CONFIG_GLOBAL': os.devnull, 'GIT_CONFIG_NOSYSTEM': '1',
            'GIT_AUTHOR_NAME': 'Test', 'GIT_AUTHOR_EMAIL': 'test@example.com',
            'GIT_COMMITTER_NAME': 'Test', 'GIT_COMMITTER_EMAIL': 'test@example.com',
            **more}


def git(repo, *args):
    done = subprocess.run(['git', '-C', str(repo), *args], env=git_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def release(repo, *args, env=None):
    """Run tools/release.py in repo: (exit status, its output, one string)."""
    done = subprocess.run([sys.executable, str(RELEASE), *args], cwd=repo,
                          env=env or git_env(), capture_output=True, text=True,
                          timeout=120)
    return done.returncode, (done.stdout + done.stderr).strip()


def set_version(repo, version):
    path = repo / 'pyproject.toml'
    path.write_text(re.sub(r'(?m)^version = ".*"$', f'version = "{version}"',
                           path.read_text()))


def commit(repo, message='change'):
    git(repo, 'add', '-A')
    git(repo, 'commit', '-q', '-m', message)


PYPROJECT = '''\
[project]
name = "multigpu-book"
version = "0.3.0"
dependencies = ["torch>=2.4"]  # a comment
'''


@pytest.fixture
def repo(tmp_path):
    """A repository with a package and pyproject.toml, one commit, no tag."""
    path = tmp_path / 'repo'
    (path / 'book' / 'data_parallel').mkdir(parents=True)
    (path / 'book' / 'data_parallel' / '__init__.py').write_text('"""A package."""\n')
    (path / 'pyproject.toml').write_text(PYPROJECT)
    (path / 'README.md').write_text('# A book\n')
    git(path, 'init', '-q', '-b', 'main')
    commit(path, 'first')
    return path


def test_release_tags_the_version_once(repo):
    assert release(repo) == (
        0, 'release: tagged v0.3.0 at HEAD (not pushed: --push REMOTE pushes it)')
    assert git(repo, 'cat-file', '-t', 'v0.3.0') == 'tag'  # annotated
    assert git(repo, 'rev-parse', 'v0.3.0^{commit}') == git(repo, 'rev-parse', 'HEAD')
    nothing = (0, 'release: v0.3.0 is tagged and the package is unchanged: nothing to '
               'release')
    assert release(repo) == nothing
    (repo / 'README.md').write_text('# A book, longer\n')  # not the package
    (repo / 'pyproject.toml').write_text(PYPROJECT.replace('# a comment', '# another'))
    commit(repo)
    assert release(repo) == nothing


def test_release_fails_when_the_package_changed_without_a_new_version(repo):
    release(repo)
    (repo / 'book' / 'data_parallel' / 'more.py').write_text('X = 1\n')
    commit(repo)
    assert release(repo, '--push', 'origin') == (1, CHANGED)
    git(repo, 'reset', '-q', '--hard', 'v0.3.0')
    (repo / 'pyproject.toml').write_text(PYPROJECT.replace('"torch>=2.4"',
                                                           '"torch>=2.5"'))
    commit(repo)
    assert release(repo) == (1, CHANGED)  # what pip installs with it changed too
    set_version(repo, '0.3.1')
    commit(repo)
    assert release(repo)[1].startswith('release: tagged v0.3.1 at HEAD')


def test_release_refuses_a_version_that_is_not_newer(repo):
    set_version(repo, '0.10.0')
    commit(repo)
    release(repo)
    set_version(repo, '0.9.9')  # older than 0.10.0 (numbers, not text)
    commit(repo)
    assert release(repo) == (1, 'release: version 0.9.9 is not newer than the tag '
                                'v0.10.0: bump version in pyproject.toml')
    assert git(repo, 'tag', '--list') == 'v0.10.0'


def test_release_pushes_the_tag_or_fails_in_one_line(repo, tmp_path):
    remote = tmp_path / 'remote.git'
    git(repo, 'clone', '-q', '--bare', str(repo), str(remote))
    git(repo, 'remote', 'add', 'origin', str(remote))
    assert release(repo, '--push', 'origin') == (
        0, 'release: tagged v0.3.0 at HEAD and pushed it to origin')
    assert git(remote, 'cat-file', '-t', 'v0.3.0') == 'tag'
    set_version(repo, '0.4.0')
    commit(repo)
    rc, line = release(repo, '--push', 'nowhere')
    assert rc == 1 and line.startswith('release: could not push v0.4.0 to nowhere: '), \
        line
    assert '\n' not in line
    assert git(repo, 'tag', '--list') == 'v0.3.0'  # no local tag that GitHub lacks


def test_release_says_what_is_wrong_in_one_line(repo, tmp_path):
    def fails(where, *args):
        rc, line = release(where, *args)
        assert rc != 0 and '\n' not in line and 'Traceback' not in line, line
        return line
    (tmp_path / 'empty').mkdir()
    assert fails(tmp_path / 'empty').startswith('release: not a git repository')
    assert fails(repo, '--push').startswith('usage: ')
    (repo / 'README.md').write_text('# A book, again\n')
    commit(repo)  # two commits: a clone of depth 1 lacks one
    shallow = tmp_path / 'shallow'
    git(tmp_path, 'clone', '-q', '--depth', '1', f'file://{repo}', str(shallow))
    assert 'shallow clone' in fails(shallow)
    set_version(repo, '1.0')
    commit(repo)
    assert fails(repo) == "release: pyproject.toml: version '1.0' is not X.Y.Z"
    (repo / 'pyproject.toml').write_text('[project\n')
    commit(repo)
    assert fails(repo).startswith('release: pyproject.toml in HEAD is not TOML: ')
    (repo / 'pyproject.toml').unlink()
    commit(repo)
    assert fails(repo) == 'release: no pyproject.toml in HEAD'
    assert git(repo, 'tag', '--list') == ''


# --- The rehearsal: GitHub is a bare repository, the reader an empty environment -----

def working_tree_files():
    """What `pip install` of a commit of this repository reads, as it is here now."""
    listed = subprocess.run(
        ['git', 'ls-files', '-co', '--exclude-standard', '--', 'pyproject.toml',
         'README.md', 'LICENSE', 'book/data_parallel'], cwd=ROOT, capture_output=True,
        text=True, check=True, timeout=60).stdout.split()
    return [name for name in listed if (ROOT / name).is_file()]


def reader_environment(tmp_path):
    """A venv that lacks data_parallel but has torch and the rest of its requirements.

    Its site-packages gets one path line to a folder of links to this venv's installed
    packages, all but this project's: its editable install (a .pth file, which a path
    line does not process) and its metadata. pip in it sees torch as installed.
    """
    venv = tmp_path / 'reader'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)],
                   check=True, timeout=120)
    here = Path(sysconfig.get_paths()['purelib'])  # this venv's, with torch
    assert (here / 'torch').is_dir(), here
    shared = tmp_path / 'shared-site-packages'
    shared.mkdir()
    for entry in here.iterdir():
        if not re.match(r'__editable__|multigpu_book|data_parallel|.*\.pth$',
                        entry.name):
            (shared / entry.name).symlink_to(entry)
    site, = venv.glob('lib/python*/site-packages')
    (site / 'shared.pth').write_text(f'{shared}\n')
    return venv / 'bin' / 'python', site


PROBE = '''\
import importlib.metadata, importlib.util, json
def state():
    try:
        version = importlib.metadata.version('multigpu-book')
    except importlib.metadata.PackageNotFoundError:
        version = None
    spec = importlib.util.find_spec('data_parallel')
    return {'version': version, 'found': spec and spec.origin,
            'torch': importlib.util.find_spec('torch') is not None}
print(json.dumps(state()))
'''
AFTER = '''
import data_parallel
print(json.dumps({**state(), 'VERSION': VERSION, 'file': data_parallel.__file__}))
'''


@pytest.mark.slow
def test_rehearsal_a_tag_reaches_a_reader(tmp_path):
    """release.py tags and pushes v<version>; the first cell of a reader copy installs
    the package from that tag; a changed package needs a new version."""
    work, github = tmp_path / 'work', tmp_path / 'github.git'
    for name in working_tree_files():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, work / name)
    git(work, 'init', '-q', '-b', 'main')
    commit(work, 'the book as it is now')
    git(work, 'clone', '-q', '--bare', str(work), str(github))
    git(work, 'remote', 'add', 'origin', str(github))
    # release.yml's step, with only the committer its env names
    env = {**git_env(), **release_step(load())['env']}
    for key in ('GIT_AUTHOR_NAME', 'GIT_AUTHOR_EMAIL'):
        env.pop(key)
    version = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']['version']
    assert release(work, '--push', 'origin', env=env) == (
        0, f'release: tagged v{version} at HEAD and pushed it to origin')
    assert git(github, 'cat-file', '-t', f'v{version}') == 'tag'
    set_version(work, '99.0.0')  # main moves on; a reader of v<version> must not see it
    commit(work, 'later')
    git(work, 'push', '-q', 'origin', 'HEAD:main')
    git(work, 'reset', '-q', '--hard', 'HEAD~1')

    python, site = reader_environment(tmp_path)
    reader = ROOT / 'notebooks' / '01_splitting_the_problem.ipynb'
    cell = next(c for c in json.loads(reader.read_text())['cells']
                if c['cell_type'] == 'code')
    reader_env = git_env(
        # the cell's https://github.com/... URL, cloned from the bare repository
        GIT_CONFIG_COUNT='1', GIT_CONFIG_KEY_0=f'url.{github}.insteadOf',
        GIT_CONFIG_VALUE_0=GITHUB,
        # no network: a requirement that is not installed already fails
        PIP_NO_INDEX='1', PIP_DISABLE_PIP_VERSION_CHECK='1',
        # build with the setuptools installed here, not one from the index; pip reads
        # PIP_NO_BUILD_ISOLATION=0 as --no-build-isolation
        PIP_NO_BUILD_ISOLATION='0', PIP_CACHE_DIR=str(tmp_path / 'pip-cache'),
        PYTHONNOUSERSITE='1')
    for key in ('PYTHONPATH', 'MULTIGPU_BOOK_PACKAGE', 'VIRTUAL_ENV'):
        reader_env.pop(key, None)
    code = PROBE + ''.join(cell['source']) + AFTER
    done = subprocess.run([str(python), '-c', code], cwd=tmp_path, env=reader_env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    before, installed, after = done.stdout.splitlines()
    assert json.loads(before) == {'version': None, 'found': None, 'torch': True}
    after = json.loads(after)
    assert after['VERSION'] == after['version'] == version
    assert installed == (f'Installed the helper package data_parallel from git+{GITHUB}'
                         f'@v{version}.')
    assert Path(after['file']).is_relative_to(site), after['file']  # not the clone's
    assert not (site / 'torch').exists()  # pip took torch as installed

    paths = work / 'book' / 'data_parallel' / 'paths.py'
    paths.write_text(paths.read_text() + '# changed\n')
    commit(work)
    changed = CHANGED.replace('v0.3.0', f'v{version}')
    assert release(work, '--push', 'origin', env=env) == (1, changed)
    major, minor, patch = map(int, version.split('.'))
    bumped = f'{major}.{minor}.{patch + 1}'
    set_version(work, bumped)
    commit(work, 'bump')
    assert release(work, '--push', 'origin', env=env) == (
        0, f'release: tagged v{bumped} at HEAD and pushed it to origin')
    assert git(github, 'tag', '--list').split() == [f'v{version}', f'v{bumped}']
