"""What several tests of the repository share: make's plans, the workflows."""
import re
import subprocess

import yaml

import data_parallel as dp

ROOT = dp.repo_root()
WORKFLOWS = ROOT / '.github' / 'workflows'


def make_plan(make_env, *args):
    """`make -n ARGS`'s plan, continued lines joined (the test fails if make does)."""
    plan = subprocess.run(['make', '-n', '--no-print-directory', *args], cwd=ROOT,
                          env=make_env, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    return plan.stdout.replace('\\\n', ' ')


def load(name):
    """Parse one workflow file; PyYAML reads the key `on` as True, so map it back."""
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc['on'] = doc.pop(True, doc.get('on'))
    return doc


def steps(doc, job=None):
    """The steps of the job named, by default of the workflow's only job."""
    if job is None:
        job, = doc['jobs']
    return doc['jobs'][job]['steps']


def index(doc, key, pattern, job=None):
    """Position of the first step whose key (run, uses, name) matches the regex."""
    found = [i for i, s in enumerate(steps(doc, job))
             if re.search(pattern, s.get(key, ''))]
    assert found, f"{doc['name']} has no step whose {key} matches {pattern!r}"
    return found[0]


def find_step(doc, key, pattern, job=None):
    """The job's first step whose key matches the regex."""
    return steps(doc, job)[index(doc, key, pattern, job)]
