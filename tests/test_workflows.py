"""The GitHub Actions workflows parse and keep their promises (triggers, permissions)."""
from pathlib import Path

import pytest
import yaml

import data_parallel as dp

WORKFLOWS = dp.repo_root() / '.github' / 'workflows'


def load(name):
    """Parse one workflow file; PyYAML reads the key `on` as True, so map it back."""
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc['on'] = doc.pop(True, doc.get('on'))
    return doc


def all_run_lines(doc):
    return [step.get('run', '') for job in doc['jobs'].values() for step in job.get('steps', [])]


@pytest.mark.parametrize('name', ['ci.yml', 'gpu.yml'])
def test_workflow_is_valid_yaml_with_jobs(name):
    doc = load(name)
    assert doc['jobs'], f'{name} defines no job'
    for job in doc['jobs'].values():
        assert 'runs-on' in job and ('steps' in job or 'uses' in job)


def test_cpu_workflow_tests_builds_and_deploys_only_from_main():
    doc = load('ci.yml')
    assert {'push', 'pull_request'} <= set(doc['on'])
    runs = all_run_lines(doc)
    assert 'make test' in runs and 'make book' in runs
    assert any(run.startswith('make browser-check') for run in runs)
    assert doc['permissions'] == {'contents': 'read'}
    deploy = doc['jobs']['deploy']
    assert "refs/heads/main" in deploy['if'] and "push" in deploy['if']
    assert deploy['permissions'] == {'pages': 'write', 'id-token': 'write'}


def test_gpu_workflow_never_runs_untrusted_code():
    doc = load('gpu.yml')
    triggers = set(doc['on'])
    assert triggers == {'push', 'schedule', 'workflow_dispatch'}
    assert doc['on']['push']['branches'] == ['main']
    job, = doc['jobs'].values()
    assert 'self-hosted' in job['runs-on'] and 'gpu' in job['runs-on']
    runs = all_run_lines(doc)
    assert runs.index('nvidia-smi') < runs.index('make test')
