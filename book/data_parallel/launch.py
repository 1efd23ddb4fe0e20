"""Starting torchrun jobs from a notebook or a test, and leaving no process behind.

The chapters show the commands as a reader would type them (``show_command``) and run
them through ``launch``, which kills every process a job started when it ends.
"""
import os
import re
import secrets
import selectors
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from . import network, processes
from .cli import JobArgumentError, check_arguments  # noqa: F401 (launch's errors)
from .paths import DATA_ENV, work_dir
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


def loopback_interface():
    """The name of the network interface that holds 127.0.0.1 (lo on Linux, lo0 on
    macOS): gloo and NCCL bind to an interface by its name."""
    return next(name for name, addresses in psutil.net_if_addrs().items()
                if any(a.address == '127.0.0.1' for a in addresses))


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
    """The end of a failed job's output, each line once, without torchrun's report."""
    err = err.splitlines()
    end = next((i for i, line in enumerate(err) if _LAUNCHER_REPORT.match(line)),
               len(err))
    said = [line for line in out.splitlines() + err[:end]
            if line.strip() and not line.startswith(_LAUNCHER_BANNER)]
    # Every rank says the same (torchrun does not tell whose line is whose): copies
    # would crowd the rest out of the last lines. A line a rank repeats shows once too.
    said = list(dict.fromkeys(said))
    return '\n'.join(said[-lines:])


def _read_lines(procs, echo, deadline, family, mark):
    """Collect every process's stdout and stderr; pass the first stdout's lines to echo.

    One loop over the pipes (no threads), so the lines reach echo in the caller's
    thread, which is the thread whose output a notebook cell shows. Twice a second it
    adds the launchers' descendants to family: once a launcher is gone they are
    orphans, and no longer found below it; then it kills them and the marked ones.
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
            family |= processes.descendants(processes.unreaped(procs))
            if all(map(processes.ended, procs)):  # gone: end workers holding a pipe
                processes.kill(procs, family | processes.marked(mark))
            looked = time.monotonic()
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
    ended (processes.stop), found below them or by the mark each inherits; if the
    caller itself is killed, Linux sends the launchers SIGTERM (processes.ORPHAN_GUARD),
    so no worker is left behind (elsewhere the job runs on to its own end). Raises
    RuntimeError (with the end of every process's output) on failure, and on Windows.
    With bandwidth (bits per second), each command runs behind a private loopback of
    that rate (network.throttled_command).
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
    mark = f'{os.getpid()}-{secrets.token_hex(8)}'  # processes.left_by reads the pid
    env = {**os.environ, 'PYTHONUNBUFFERED': '1', **(env or {}), processes.MARK: mark}
    if env.get(DATA_ENV):  # relative to this folder, as data_root reads it, not theirs
        env[DATA_ENV] = str(Path(env[DATA_ENV]).absolute())
    echo = _print_line if echo is True else echo
    procs, family = [], set()
    try:
        for command in commands:
            extra, argv = command if isinstance(command, tuple) else ({}, command)
            if bandwidth is not None:
                argv = network.throttled_command(argv, bandwidth)
            procs.append(subprocess.Popen(
                processes.guarded(argv), cwd=work_dir(), env={**env, **extra},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True))
        deadline = time.monotonic() + timeout
        outputs = _read_lines(procs, echo, deadline, family, mark)
        if outputs is not None:  # every pipe is closed: the launchers are ending
            processes.wait_ended(procs, max(deadline, time.monotonic() + 1))
        if outputs is None or not all(map(processes.ended, procs)):
            raise RuntimeError(f'the job ran past its {timeout} s limit and was '
                               'stopped: give it more time (timeout=...)')
    finally:
        processes.stop(procs, family, mark)
        processes.wait_ended(procs)  # killed: reaped at once
        for p in procs:
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
