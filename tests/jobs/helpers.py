"""What the job tests share: torchrun jobs on the CPU, and programs run as Python."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import data_parallel as dp
from data_parallel import CPU_ONLY, launch  # CPU_ONLY: gloo, also on a GPU runner


def torchrun(program, world_size, *args, max_restarts=0, env=None, timeout=300):
    """torchrun program (a module's name, or a script's Path) on the CPU; its stdout."""
    script = program if isinstance(program, Path) else None
    command = launch.torchrun_command(args, world_size, max_restarts, module=program,
                                      script=script)
    out, = launch.launch(command, env={**CPU_ONLY, **(env or {})}, timeout=timeout)
    return out


def record_of(program, world_size, *args, **kwargs):
    """The RESULT record of torchrun(program, world_size, *args, **kwargs)."""
    return dp.read_result(torchrun(program, world_size, *args, **kwargs))


def failure(program, world_size, *args, **kwargs):
    """The error text of a torchrun job that must fail."""
    with pytest.raises(RuntimeError) as error:
        torchrun(program, world_size, *args, **kwargs)
    return str(error.value)


def python(*argv, env=None):
    """Run python with argv in the repository's root, without GPUs."""
    return subprocess.run([sys.executable, *map(str, argv)], capture_output=True,
                          text=True, timeout=120, cwd=dp.repo_root(),
                          env={**os.environ, **CPU_ONLY, **(env or {})})
