"""Checks on command-line arguments: in the programs that torchrun starts, and in
launch, which runs a program's own checks before it starts a job (check_arguments)."""
import argparse
import contextlib
import importlib
import io
import os


def at_least(minimum, kind, most=None):
    """An argparse type: a number of the given kind, at least minimum (at most most)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            noun = 'a whole number' if kind is int else 'a number'
            raise argparse.ArgumentTypeError(f'{text!r} is not {noun}') from None
        if not value >= minimum or value != value:
            raise argparse.ArgumentTypeError(
                f'{text} is too small: use at least {minimum}')
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f'{text} is too large: use at most {most}')
        return value
    return parse


def positive_float(text):
    """An argparse type: a finite number greater than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not a number') from None
    if not 0 < value < float('inf'):
        raise argparse.ArgumentTypeError(f'{text}: use a finite number greater than 0')
    return value


def add_batch_size(parser, default, most=None, nargs=None,
                   help='global minibatch, split evenly over all processes'):
    """Add --batch-size: a global minibatch, of which each process takes a k-th."""
    parser.add_argument('--batch-size', type=at_least(1, int, most), default=default,
                        nargs=nargs, help=help)
    parser.set_defaults(batch_is_global=True)  # what batch_problem looks for


def batch_problem(args, world_size):
    """The line refusing a global --batch-size that world_size cannot split, or None."""
    # DDP averages the processes' mean losses, which is the mean over the batch only
    # when their parts are equal: an empty part (batch 1 over 2) would halve the step
    if not getattr(args, 'batch_is_global', False):
        return None
    sizes = args.batch_size if isinstance(args.batch_size, list) else [args.batch_size]
    for size in sizes:
        if size % world_size:
            return (f'--batch-size {size} does not split evenly over {world_size} '
                    f'processes: use a multiple of {world_size}.')
    return None


def check_batch(args):
    """Stop this process on batch_problem's line, before it joins the job's group."""
    # On every rank, before init_process_group: a rank that left just after joining could
    # cut another's gloo connection short, and that error would end the job's output
    problem = batch_problem(args, int(os.environ.get('WORLD_SIZE', 1)))
    if problem:
        stop(problem, int(os.environ.get('RANK', 0)))


def stop(problem, rank):
    """End this process of a job: rank 0 says problem in one line, the others exit 1."""
    # one rank says it: the lines of several ranks can interleave on torchrun's stderr
    raise SystemExit(problem if rank == 0 else 1)


class JobArgumentError(ValueError):
    """Arguments that a job's program would refuse: one line, raised before torchrun."""

    def _render_traceback_(self):  # IPython shows these lines instead of a traceback
        return [str(self)]


def check_arguments(module, module_args, world_size=None):
    """Raise JobArgumentError with the program's own error line if it refuses the args.

    The program's parse_args runs here, in the caller's process, so that a mistake costs
    one line and no job: in a worker, torchrun would add its report of the failure.
    Given world_size, a global --batch-size must split evenly (batch_problem).
    """
    parse_args = getattr(importlib.import_module(module), 'parse_args', None)
    if parse_args is None:
        return
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(None):
            args = parse_args([str(arg) for arg in module_args])
    except SystemExit as exited:
        if exited.code:  # argparse prints usage, then "prog: error: ..." last
            raise JobArgumentError(said.getvalue().strip().splitlines()[-1]) from None
        # --help (or -h) prints usage and exits 0: in a job every rank would print it
        raise JobArgumentError(f'{module} {" ".join(map(str, module_args))}: --help is '
                               'not a job: run `python -m '
                               f'{module} --help` to read the usage.') from None
    problem = world_size and batch_problem(args, world_size)
    if problem:
        raise JobArgumentError(problem)
