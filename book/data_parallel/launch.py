"""Starting torchrun jobs from a notebook or a test, and leaving no process behind.

The chapters show the commands as a reader would type them (``show_command``) and run
them through ``launch``, which kills every process a job started when it ends.
"""
import contextlib
import os
import re
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import time

import psutil

from . import network
from .cli import JobArgumentError, check_arguments  # noqa: F401 (launch's errors)
from .paths import work_dir
from .results import read_result

TRAINER = 'data_parallel.train_ddp'
"""The module that the DDP chapter teaches; ``torchrun -m`` starts it."""


def free_port():
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def torchrun_command(module_args=(), world_size=2, max_restarts=0, module=TRAINER,
                     script=None):
    """(environment, argv) for torchrun on this machine; --standalone finds a free port.

    torchrun starts `python -m module`, or the file `script` when one is given. The
    module's arguments are checked first (check_arguments), with world_size.
    """
    if script is None:
        check_arguments(module, module_args, world_size)
    # Restarted workers must not reuse the previous attempt's rendezvous store, whose
    # stale addresses make them connect to dead peers (pytorch/pytorch#135712).
    env = {'TORCH_DISABLE_SHARE_RDZV_TCP_STORE': '1'} if max_restarts else {}
    restarts = [f'--max-restarts={max_restarts}'] if max_restarts else []
    argv = [sys.executable, '-m', 'torch.distributed.run', '--standalone',
            f'--nproc-per-node={world_size}', *restarts,
            *([str(script)] if script else ['-m', module]), *map(str, module_args)]
    return env, argv


def multinode_command(node_rank, addr, port, ifname, module_args=(), nnodes=2,
                      nproc_per_node=2, module=TRAINER):
    """(environment, argv) for one node of a multi-machine job, as the chapter shows."""
    check_arguments(module, module_args, nnodes * nproc_per_node)
    env = {'GLOO_SOCKET_IFNAME': ifname, 'NCCL_SOCKET_IFNAME': ifname}
    argv = [sys.executable, '-m', 'torch.distributed.run', f'--nnodes={nnodes}',
            f'--nproc-per-node={nproc_per_node}', f'--node-rank={node_rank}',
            f'--rdzv-endpoint={addr}:{port}', '-m', module, *map(str, module_args)]
    return env, argv


def show_command(env, argv, width=88):
    """The command as typed in a shell, broken into lines of at most width columns."""
    words = ['torchrun'] + argv[3:]  # argv starts: python -m torch.distributed.run
    words = [f'{k}={v}' for k, v in env.items()] + words
    lines, line = [], ''
    for word in map(shlex.quote, words):
        if line and len(line) + 1 + len(word) > width - 2:
            lines.append(line + ' \\')
            line = '    ' + word
        else:
            line = f'{line} {word}' if line else word
    return '\n'.join(lines + [line])


_LAUNCHER_REPORT = re.compile(r'^(Traceback|[EWI]\d{4} \d\d:\d\d)')
_LAUNCHER_BANNER = ('*****', 'Setting OMP_NUM_THREADS')  # torchrun's note on threads


def _what_the_workers_said(out, err, lines=15):
    """The end of a failed job's output, without torchrun's own report that follows."""
    err = err.splitlines()
    end = next((i for i, line in enumerate(err) if _LAUNCHER_REPORT.match(line)),
               len(err))
    said = [line for line in out.splitlines() + err[:end]
            if line.strip() and not line.startswith(_LAUNCHER_BANNER)]
    return '\n'.join(said[-lines:])


def _read_lines(procs, echo, deadline, family):
    """Collect every process's stdout and stderr; pass the first stdout's lines to echo.

    One loop over the pipes (no threads), so the lines reach echo in the caller's
    thread, which is the thread whose output a notebook cell shows. Twice a second it
    adds the launchers' descendants to family: once a launcher is gone they are
    orphans, and no longer found below it.
    """
    selector = selectors.DefaultSelector()
    texts = [[[], []] for _ in procs]
    looked = 0.0  # when the launchers' descendants were last looked up
    partial = {}
    for i, p in enumerate(procs):
        for j, pipe in enumerate((p.stdout, p.stderr)):
            os.set_blocking(pipe.fileno(), False)
            selector.register(pipe, selectors.EVENT_READ, (i, j))
    while selector.get_map():
        if time.monotonic() - looked > 0.5:  # a walk over all processes: milliseconds
            family |= _descendants(_unreaped(procs))
            looked = time.monotonic()
        if all(p.poll() is not None for p in procs):
            _kill(procs, family)  # the launchers are gone: end workers holding a pipe
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        for key, _ in selector.select(timeout=min(left, 1.0)):
            i, j = key.data
            chunk = os.read(key.fd, 65536)
            if not chunk:  # end of file: the process closed this pipe
                selector.unregister(key.fileobj)
                chunk = b'\n' if partial.get(key.data) else b''
            text = partial.pop(key.data, b'') + chunk
            *lines, rest = text.split(b'\n')
            if rest:
                partial[key.data] = rest
            for line in lines:
                line = line.decode(errors='replace') + '\n'
                texts[i][j].append(line)
                if echo and i == 0 and j == 0:
                    echo(line)
    selector.close()
    return [(''.join(out), ''.join(err)) for out, err in texts]


# Reading the process table is best effort. A process that vanishes or is not ours
# raises NoSuchProcess, ZombieProcess or AccessDenied (psutil.Error); a table that
# cannot be read raises OSError (psutil.pids() lists /proc on Linux), IndexError (an
# empty /proc: `_LOWEST_PID = ret[0]` in psutil/__init__.py) or what psutil's C code
# raises elsewhere (RuntimeError on macOS, psutil#910). None of them may stop a job's
# end: a process that cannot be read is not killed by pid, and _stop still ends the job
# through torchrun's SIGTERM and the launchers' process groups.


def _started(pid):
    """(pid, start time) of a live process, or None: a pid reused later differs."""
    try:
        return pid, psutil.Process(pid).create_time()
    except Exception:  # gone, or unreadable (see above)
        return None


def _descendants(pids):
    """Every process below the given ones that can be read, as _started pairs."""
    found = set()
    for pid in pids:
        try:  # children() skips a child that vanishes mid-walk, and a reused pid
            found |= {(child.pid, child.create_time())  # cached by children()
                      for child in psutil.Process(pid).children(recursive=True)}
        except Exception:  # gone, or unreadable (see above)
            pass
    return found


def _unreaped(procs):
    """The pids of the launchers not yet reaped: none of them can belong to another."""
    return [p.pid for p in procs if p.returncode is None]


def _kill(procs, family):
    """SIGKILL the launchers' process groups and every remembered descendant."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
    for pid, start in family:
        if _started(pid) == (pid, start):  # not a new process that got the same pid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _stop(procs, family, grace=10):
    """End a job as torchrun expects: SIGTERM to each launcher, wait, then SIGKILL all.

    torchrun starts each worker in a session of its own (start_new_session in
    torch/distributed/elastic/multiprocessing/subprocess_handler/subprocess_handler.py),
    so killing the launcher's group does not reach them; on SIGTERM its agent shuts its
    workers down ("Received ... death signal, shutting down workers" in
    torch/distributed/elastic/agent/server/api.py). What survives the grace period is
    killed, from the list of processes found before any signal was sent.
    """
    family = set(family) | _descendants(_unreaped(procs))
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    _kill(procs, family)


# Run first in each launcher: it asks Linux to send it SIGTERM when the process that
# started it dies (PR_SET_PDEATHSIG), so that a notebook kernel killed outright (a
# shutdown, nbval after Ctrl-C) still ends its jobs, then it becomes the launcher.
_ORPHAN_GUARD = ('import ctypes, os, signal, sys\n'
                 'ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n'
                 'if os.getppid() != int(sys.argv[1]):\n'
                 '    sys.exit(1)  # the parent died before the request was made\n'
                 'try:\n'
                 '    os.execvp(sys.argv[2], sys.argv[2:])\n'
                 'except OSError as error:\n'
                 '    sys.exit(f"cannot start {sys.argv[2]}: {error.strerror}")')


def _guarded(argv):
    """argv behind _ORPHAN_GUARD on Linux; unchanged elsewhere."""
    if not sys.platform.startswith('linux'):
        return list(argv)
    return [sys.executable, '-c', _ORPHAN_GUARD, str(os.getpid()), *map(str, argv)]


def _print_line(line):
    """Show a job's line in the cell, except its RESULT record (read_result's)."""
    if not line.startswith('RESULT '):
        print(line, end='', flush=True)


def launch(*commands, env=None, timeout=900, echo=False, bandwidth=None):
    """Run one or more commands at once, each in its own session; return their stdout.

    They run in the work folder (the repository's root, or the current folder). With
    echo=True the first command's standard output is printed line by line as it comes
    (rank 0's lines, without the RESULT record); a function given as echo
    receives each line instead. When the commands finish, fail or time out, or the
    caller is interrupted (Ctrl-C, a kernel interrupt), every process they started is
    ended (_stop); if the caller itself is killed, Linux sends the launchers SIGTERM
    (_ORPHAN_GUARD), so no worker is left behind (elsewhere the job runs on to its own
    end). Raises RuntimeError (with the end of every process's output) on failure, and
    on Windows. With bandwidth (bits per second), each command runs behind a private
    loopback of that rate (network.throttled_command).
    """
    if os.name != 'posix':  # os.killpg, SIGKILL, setsid and select() on pipes
        raise RuntimeError('launch runs jobs on Linux and macOS only: on Windows, run '
                           'the chapters in WSL (Windows Subsystem for Linux)')
    if bandwidth is not None and len(commands) > 1:  # each in a namespace of its own
        raise ValueError(f'bandwidth with {len(commands)} commands: each would get a '
                         'private loopback of its own and they could never meet; '
                         'throttle one command (its torchrun starts every process).')
    problem = bandwidth is not None and network.throttle_problem()
    if problem:
        raise RuntimeError(f'bandwidth={bandwidth:g} cannot be set on this machine: '
                           f'{problem}')
    env = {**os.environ, 'PYTHONUNBUFFERED': '1', **(env or {})}
    echo = _print_line if echo is True else echo
    procs, family = [], set()
    try:
        for command in commands:
            extra, argv = command if isinstance(command, tuple) else ({}, command)
            if bandwidth is not None:
                argv = network.throttled_command(argv, bandwidth)
            procs.append(subprocess.Popen(
                _guarded(argv), cwd=work_dir(), env={**env, **extra},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True))
        deadline = time.monotonic() + timeout
        outputs = _read_lines(procs, echo, deadline, family)
        for p in procs:
            if outputs is not None:  # every pipe is closed: the launchers are ending
                try:
                    p.wait(timeout=max(1, deadline - time.monotonic()))
                    continue
                except subprocess.TimeoutExpired:
                    pass
            raise RuntimeError(f'the job ran past its {timeout} s limit and was '
                               'stopped: give it more time (timeout=...)')
    finally:
        _stop(procs, family)
        for p in procs:
            p.wait()
            p.stdout.close(), p.stderr.close()
    for p, (out, err) in zip(procs, outputs):
        if p.returncode != 0:
            raise RuntimeError(f'torchrun exited with code {p.returncode}:\n'
                               + _what_the_workers_said(out, err))
    return [out for out, _ in outputs]


def run(module, world_size, *args, timeout=600, max_restarts=0, env=None, echo=False,
        bandwidth=None):
    """torchrun module (a name, or the module) with world_size processes; its record.

    The record is the job's `RESULT <json>` line (read_result). echo=True prints rank
    0's other lines as they come; bandwidth (bits per second) throttles its network.
    """
    name = module if isinstance(module, str) else module.__name__
    command = torchrun_command(args, world_size, max_restarts=max_restarts, module=name)
    out, = launch(command, env=env, timeout=timeout, echo=echo,  # kills all it started
                  bandwidth=bandwidth)
    return read_result(out)
