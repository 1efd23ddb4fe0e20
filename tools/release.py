"""Tag a release of the helper package: the version in pyproject.toml is the release.

A chapter opened on its own (Colab, Kaggle, a download) installs the package from the
tag v<version> (the buttons open the reader copy at the commit the page was built from):
every version on main needs its tag, and a tag must keep meaning one package. Run at the repository's
root, tags fetched:

    python tools/release.py                tag v<version> at HEAD, here only
    python tools/release.py --push origin  ... and push the tag (release.yml, on main)

No tag v<version> yet: tag HEAD (annotated), unless the version is not newer than the
newest v* tag. The tag exists: fail if the package (book/data_parallel/, or what
pyproject.toml says pip installs) changed since; else there is nothing to release.
One line per outcome; exit status 0 (tagged, or nothing to do) or 1 (it says why).
"""
import re
import subprocess
import sys
import tomllib

PACKAGE = 'book/data_parallel'
# What pyproject.toml says pip installs, besides the code: requirements and packaging.
PROJECT_KEYS = ('dependencies', 'optional-dependencies', 'requires-python')
VERSION = re.compile(r'(\d+)\.(\d+)\.(\d+)')


class Failed(Exception):
    """The one line that says why there is no release."""


def git(*args):
    """git's stdout (stripped); Failed with git's last line when it fails."""
    try:
        done = subprocess.run(['git', *args], capture_output=True, text=True,
                              timeout=120)
    except FileNotFoundError:
        raise Failed('git is not installed') from None
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip()] or ['?']
        raise Failed(f'git {args[0]}: {said[-1].strip()}')
    return done.stdout.strip()


def pyproject(rev):
    """pyproject.toml of a commit, parsed."""
    try:
        text = git('show', f'{rev}:pyproject.toml')
    except Failed:
        raise Failed(f'no pyproject.toml in {rev}') from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise Failed(f'pyproject.toml in {rev} is not TOML: {error}') from None


def parse(version):
    """(major, minor, patch) of 'X.Y.Z'; None for anything else."""
    match = VERSION.fullmatch(version or '')
    return tuple(map(int, match.groups())) if match else None


def what_pip_installs(rev):
    """The parts of pyproject.toml of rev that change what `pip install` of it gives."""
    toml = pyproject(rev)
    project, tool = toml.get('project', {}), toml.get('tool', {})
    return [project.get(key) for key in PROJECT_KEYS], tool.get('setuptools')


def release(remote=None):
    """Tag (and push) the version of HEAD, or say why not; the line to print."""
    try:
        git('rev-parse', '--is-inside-work-tree')
    except Failed:
        raise Failed('not a git repository: run this at the root of a clone') from None
    if git('rev-parse', '--is-shallow-repository') == 'true':
        raise Failed('a shallow clone lacks the tags: fetch all (fetch-depth: 0)')
    version = pyproject('HEAD').get('project', {}).get('version')
    if parse(version) is None:
        raise Failed(f'pyproject.toml: version {version!r} is not X.Y.Z')
    tag = f'v{version}'
    tags = git('tag', '--list', 'v*').split()
    if tag in tags:
        if (git('diff', '--name-only', tag, 'HEAD', '--', PACKAGE)
                or what_pip_installs(tag) != what_pip_installs('HEAD')):
            raise Failed(f'the package changed since {tag} without a new version: '
                         'bump version in pyproject.toml')
        return f'{tag} is tagged and the package is unchanged: nothing to release'
    newest = max(((parse(t[1:]), t) for t in tags if parse(t[1:])), default=None)
    if newest and newest[0] >= parse(version):
        raise Failed(f'version {version} is not newer than the tag {newest[1]}: '
                     'bump version in pyproject.toml')
    git('tag', '-a', tag, '-m', f'multigpu-book {version}', 'HEAD')
    if remote is None:
        return f'tagged {tag} at HEAD (not pushed: --push REMOTE pushes it)'
    try:
        git('push', remote, f'refs/tags/{tag}')
    except Failed as failed:
        git('tag', '-d', tag)  # a local tag that GitHub lacks would hide the failure
        raise Failed(f'could not push {tag} to {remote}: {failed}') from None
    return f'tagged {tag} at HEAD and pushed it to {remote}'


def main(argv):
    if argv and (len(argv) != 2 or argv[0] != '--push'):
        sys.exit('usage: python tools/release.py [--push REMOTE]')
    try:
        print(f'release: {release(argv[1] if argv else None)}')
    except Failed as failed:
        sys.exit(f'release: {failed}')


if __name__ == '__main__':
    main(sys.argv[1:])
