"""make gpu-check: the book's GPU paths in a few minutes, ending in one summary table.

On a machine with a GPU it runs these steps in turn, each under its own time limit (at
most 30 minutes in all; not yet timed on a GPU):

0. Fashion-MNIST in MULTIGPU_DATA, downloaded when missing (without it pytest would
   quietly skip every test that reads it);
1. the tests whose code takes another path on CUDA (``pytest -m cuda tests``);
2. nbval over the chapters that book/chapters.toml marks gpu_check, 1-6 (their stored
   outputs, recomputed on this machine);
3. chapter 7's DDP job: LeNet for 3 epochs, one process per GPU (NCCL);
4. ResNet-18 for 2 epochs on one GPU (seconds per epoch);
5. with 2 GPUs or more: ring and star against dist.all_reduce under NCCL (25 MB, one
   process per GPU), and their bus bandwidth;
6. with 2 GPUs or more, each under NCCL with the checks of its chapter: chapter 11's
   tensor-parallel check (2 processes), chapter 12's pipeline schedules and chapter 9's
   sharded training (4 processes with 4 GPUs or more, else 2).

`--jobs-only` leaves out steps 1 and 2, which `make test` repeats on the same machine
(gpu.yml runs both).

It prints a line per step as it ends, then the summary (GPU, CUDA, driver, compute
capability, steps, figures), and exits 1 if a step failed. Without a GPU it says so in
one line and exits 0. From the repository's root, with MULTIGPU_DATA naming the folder
that holds FashionMNIST/raw/:

    make gpu-check          (or: .venv/bin/python tools/gpu_check.py [--jobs-only])
"""
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib

import torch

import data_parallel as dp
from data_parallel import launch
from data_parallel.jobs import perf_workers, pp_workers, shard_workers, tp_workers
from data_parallel.pipeline import bubble_fraction

ROOT = dp.repo_root()
WIDTH = 88
MIN_ACCURACY = 0.5  # chance is 0.1; the book's LeNet reaches 0.77 after 3 epochs on CPU
TAIL_LINES = 20  # of a failed step's output, printed after the table

Step = collections.namedtuple('Step', 'key title run timeout')
Result = collections.namedtuple('Result', 'step ok seconds detail figures output')


class StepFailed(Exception):
    """A step did not do what it should; args: (one-line reason, output or '')."""


def gpu_count():
    """GPUs that PyTorch can use here (0 when CUDA is unavailable)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def driver_version():
    """The NVIDIA driver's version from nvidia-smi, or why it is not known."""
    if not shutil.which('nvidia-smi'):
        return 'unknown (no nvidia-smi)'
    try:
        out = subprocess.run(['nvidia-smi', '--query-gpu=driver_version',
                              '--format=csv,noheader'], capture_output=True, text=True,
                             timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        out = []
    return out[0] if out else 'unknown (nvidia-smi failed)'


def gpu_info():
    """What the summary says about the machine: GPUs, capability, versions."""
    n = gpu_count()
    names = collections.Counter(torch.cuda.get_device_name(i) for i in range(n))
    caps = sorted({'%d.%d' % torch.cuda.get_device_capability(i) for i in range(n)})
    return {'gpus': ', '.join(f'{c} x {name}' for name, c in names.items()),
            'capability': ', '.join(caps), 'torch': torch.__version__,
            'cuda': torch.version.cuda or 'none', 'driver': driver_version()}


def run_command(argv, timeout):
    """Run argv in the repository; return its output, or raise StepFailed."""
    # its own session: a timeout kills all it started (kernels, torchrun jobs) with it
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise StepFailed(f'ran past its {timeout} s limit', output) from None
    if proc.returncode != 0:
        raise StepFailed(f'exit code {proc.returncode}: {last_line(output)}', output)
    return output


def last_line(text):
    """The last non-empty line of text (pytest's summary line, for one)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ''


def run_step(step):
    """Run one step under its time limit; a Result, whatever happens."""
    start = time.perf_counter()
    try:
        detail, figures, output = step.run(step.timeout)
        ok = True
    except StepFailed as failure:
        (detail, output), figures, ok = failure.args, {}, False
    except Exception as error:  # a step must not stop the others
        detail, figures, output, ok = f'{type(error).__name__}: {error}', {}, '', False
    return Result(step, ok, time.perf_counter() - start, detail, figures, output)


def fashion_mnist(timeout):
    """The data every later step reads, or one line saying why it cannot be had."""
    try:
        for train in (True, False):
            dp.read_fashion_mnist(train)
    except dp.DataUnavailableError as error:
        raise StepFailed(str(error), '') from None
    return f'in {dp.data_root()}', {}, ''


def unit_tests(timeout):
    """Tests marked cuda (tests/conftest.py): their code takes another path on CUDA."""
    out = run_command([sys.executable, '-m', 'pytest', '-q', '-m', 'cuda', 'tests'],
                      timeout)
    return last_line(out), {}, out


def checked_chapters():
    """The chapters whose facts in book/chapters.toml include gpu_check, in order."""
    facts = tomllib.loads((ROOT / 'book' / 'chapters.toml').read_text())
    return [path for path in sorted((ROOT / 'book').glob('[0-9][0-9]_*.ipynb'))
            if facts.get(path.name[:2], {}).get('gpu_check')]


def chapter_span(chapters):
    """'1-6' for chapters 01 to 06 (the step's name), '4' for 04 alone."""
    numbers = [str(int(path.name[:2])) for path in chapters]
    if len(numbers) < 2:
        return ''.join(numbers) or 'none'
    return f'{numbers[0]}-{numbers[-1]}'


def notebooks(timeout):
    """nbval over the GPU check's chapters, outputs sanitised as in `make nbval`."""
    chapters = checked_chapters()
    if not chapters:
        raise StepFailed('book/chapters.toml marks no chapter gpu_check', '')
    out = run_command([sys.executable, '-m', 'pytest', '-q', '--nbval',
                       '--nbval-current-env', '--nbval-sanitize-with',
                       'tests/nbval_sanitize.cfg', *chapters], timeout)
    return last_line(out), {}, out


def check_record(record, world_size, out):
    """The job used NCCL with one GPU per process and learned something."""
    devices = record['devices']
    if record['world_size'] != world_size:
        raise StepFailed(f"ran {record['world_size']} process(es), not {world_size}",
                         out)
    if record['backend'] != 'nccl' or len(set(devices)) != world_size \
            or not all(d.startswith('cuda:') for d in devices):
        raise StepFailed(f"ran on {record['backend']} / {sorted(set(devices))}, not "
                         f'NCCL with one GPU per process', out)
    accuracy = record['accuracies'][-1]
    if not accuracy >= MIN_ACCURACY:
        raise StepFailed(f'test accuracy {accuracy:.3f} < {MIN_ACCURACY}', out)
    return accuracy


def ddp_job(args, world_size, what, figure_name):
    """A step that runs train_ddp under torchrun and checks rank 0's RESULT line."""
    def run(timeout):
        command = launch.torchrun_command(args, world_size=world_size)
        try:
            out, = launch.launch(command, timeout=timeout)  # kills all it started
            record = dp.read_result(out)
        except RuntimeError as error:  # launch or read_result says why, and the output
            raise StepFailed(str(error).splitlines()[0], str(error)) from None
        accuracy = check_record(record, world_size, out)
        return (f'{what}, accuracy {accuracy:.3f}',
                {figure_name: record['seconds_per_epoch']}, out)
    return run


def allreduce(world_size):
    """Ring and star equal dist.all_reduce under NCCL; their bus bandwidth."""
    def run(timeout):
        try:  # quiet (echo=False): one line per step, printed below
            result = launch.run(perf_workers, world_size, 'allreduce', '--mb', 25,
                                timeout=timeout)
        except RuntimeError as error:
            raise StepFailed(str(error).splitlines()[0], str(error)) from None
        if not result.get('checked') or result.get('backend') != 'nccl' \
                or result.get('world_size') != world_size:
            raise StepFailed(f"not checked under NCCL on {world_size} GPUs: "
                             f"{result.get('backend')}, world_size "
                             f"{result.get('world_size')}", json.dumps(result))
        return (f'{world_size} GPUs, ring and star equal all_reduce',
                {'busbw': result['busbw']}, json.dumps(result))
    return run


def nccl_job(module, world_size, args, checks):
    """A step that runs module's job on world_size GPUs, with its chapter's checks.

    checks(record) gives (passed, what) pairs; the first that failed says why.
    """
    def run(timeout):
        try:
            record = launch.run(module, world_size, *args, timeout=timeout)
        except RuntimeError as error:
            raise StepFailed(str(error).splitlines()[0], str(error)) from None
        out = json.dumps(record)
        if record.get('backend') != 'nccl' or record.get('world_size') != world_size:
            raise StepFailed(f"ran on {record.get('backend')} with world_size "
                             f"{record.get('world_size')}, not NCCL on {world_size} "
                             'GPUs', out)
        failed = [what for passed, what in checks(record) if not passed]
        if failed:
            raise StepFailed(failed[0], out)
        return f'{world_size} GPUs, NCCL, as the chapter checks', {}, out
    return run


def tensor_parallel_checks(r):
    """Chapter 11's: the split layers equal one device, one collective each way."""
    conv = r['conv']
    checks = [(conv['output'] < 1e-6 and conv['tf32'] is False,
               f"convolution off by {conv['output']:.1e}, TF32 {conv['tf32']}"),
              (conv['forward'] == {'all_gather': 1}, f"convolution: {conv['forward']}")]
    for name in ('scratch', 'dtensor'):
        m = r[name]
        worst = max(m['output'], m['param_grads'], m['input_grad'])
        checks += [(worst < 1e-5, f'{name} MLP off by {worst:.1e}'),
                   (m['forward'] == m['backward'] == {'all_reduce': 1},
                    f"{name} MLP: {m['forward']}, {m['backward']}")]
    return checks


def pipeline_checks(r):
    """Chapter 12's: the unsplit gradients, and the sleeping stages' bubble."""
    p, checks = r['world_size'], []
    for name, s in r['schedules'].items():
        share = 1 - sum(s['busy_seconds']) / (p * s['step_seconds'])
        checks += [(s['max_difference'] < 1e-6,
                    f"{name}: gradients off by {s['max_difference']:.1e}"),
                   (min(s['busy_seconds']) >= 4 * 0.060 * 0.99,
                    f"{name}: a stage slept {min(s['busy_seconds']):.3f} s"),
                   (s['step_seconds'] >= (4 + p - 1) * 0.060 * 0.98,
                    f"{name}: step {s['step_seconds']:.3f} s, under the critical path"),
                   (share >= bubble_fraction(p, 4) - 0.03,
                    f'{name}: idle share {share:.3f}, under the formula')]
    return checks


def sharded_checks(r):
    """Chapter 9's: ZeRO and FSDP2 train as DDP does; FSDP2 holds 3N x 4 / k bytes."""
    fsdp, formula = r['impls']['fsdp'], 3 * r['num_params'] * 4 / r['world_size']
    held = max(p + o for p, o in zip(fsdp['parameter_bytes'], fsdp['optimizer_bytes']))
    return [*((i['max_difference'] < 1e-5, f"{n}: {i['max_difference']:.1e} from DDP")
              for n, i in r['impls'].items()),
            (abs(held / formula - 1) < 0.10, f'FSDP2 holds {held:,} bytes per process, '
                                             f'not {formula:,.0f}')]


def multi_gpu_steps(num_gpus):
    """The steps that need 2 GPUs or more."""
    k = 4 if num_gpus >= 4 else 2  # the chapters' largest job, where the GPUs allow
    return [Step('allreduce', 'ring vs all_reduce', allreduce(num_gpus), 180),
            Step('tensor', 'chapter 11 tensor parallel', nccl_job(
                tp_workers, 2, ['check'], tensor_parallel_checks), 90),
            Step('pipeline', 'chapter 12 pipelining', nccl_job(
                pp_workers, k, ['schedules'], pipeline_checks), 90),
            Step('sharded', 'chapter 9 ZeRO and FSDP2', nccl_job(
                shard_workers, k, ['train', '--steps', 3], sharded_checks), 120)]


REPEATED_BY_MAKE_TEST = ('unit', 'nbval')


def steps_for(num_gpus, jobs_only=False):
    """The steps for this machine, each with its time limit in seconds."""
    batch = max(num_gpus, 256 // num_gpus * num_gpus)  # ~256 that splits evenly
    lenet = ['--epochs', 3, '--batch-size', batch, '--lr', 0.2]  # chapter 7's job
    resnet = ['--model', 'resnet18', '--epochs', 2, '--batch-size', 256, '--lr', 0.1]
    steps = [Step('data', 'Fashion-MNIST', fashion_mnist, 120),
             Step('unit', 'CUDA-path tests', unit_tests, 360),
             Step('nbval', f'nbval, chapters {chapter_span(checked_chapters())}',
                  notebooks, 360),
             Step('ddp', 'chapter 7 DDP, LeNet', ddp_job(
                 lenet, num_gpus, f'{num_gpus} process(es), NCCL',
                 'lenet_seconds_per_epoch'), 180),
             Step('resnet18', 'ResNet-18, 2 epochs', ddp_job(
                 resnet, 1, '1 GPU', 'resnet18_seconds_per_epoch'), 300)]
    steps += multi_gpu_steps(num_gpus) if num_gpus >= 2 else []
    return [s for s in steps if not (jobs_only and s.key in REPEATED_BY_MAKE_TEST)]


def fit(text, width):
    """text cut to width characters (an ellipsis marks the cut)."""
    return text if len(text) <= width else text[:width - 3] + '...'


def step_line(result):
    """The one line printed as a step ends."""
    verdict = 'pass' if result.ok else 'FAIL'
    return fit(f'{verdict}  {result.step.title:<22} {result.seconds:7.1f} s  '
               + result.detail, WIDTH)


def figure(results, name, fmt='{:.2f} s/epoch'.format):
    """A figure that some step measured, formatted; or why there is none."""
    found = [result.figures[name] for result in results if name in result.figures]
    return fmt(found[0]) if found else 'not measured'


def bandwidth(busbw):
    """Each algorithm's bus bandwidth, in GB/s."""
    return ', '.join(f'{name} {value / 1e9:.1f} GB/s' for name, value in busbw.items())


def summary(info, results, num_gpus):
    """The summary table, as lines of at most WIDTH characters."""
    rule = '-' * WIDTH
    failed = [r for r in results if not r.ok]
    rows = [rule, 'GPU check summary', rule,
            f"{'GPUs':<24}{info['gpus']}",
            f"{'compute capability':<24}{info['capability']}",
            f"{'PyTorch / CUDA':<24}{info['torch']} / CUDA {info['cuda']}",
            f"{'NVIDIA driver':<24}{info['driver']}", rule,
            f"{'step':<28}{'result':<8}{'seconds':>8}  detail"]
    rows += [f"{r.step.title:<28}{'pass' if r.ok else 'FAIL':<8}{r.seconds:8.1f}  "
             + r.detail for r in results]  # each row is cut to WIDTH below
    if num_gpus < 2:
        rows += [f"{s.title:<28}{'skip':<8}{'':>8}  needs 2 GPUs or more"
                 for s in multi_gpu_steps(2)]
    rows += [rule,
             f"{'LeNet DDP':<24}" + figure(results, 'lenet_seconds_per_epoch'),
             f"{'ResNet-18':<24}" + figure(results, 'resnet18_seconds_per_epoch'),
             f"{'allreduce bus bandwidth':<24}" + (
                 figure(results, 'busbw', bandwidth) if num_gpus >= 2
                 else 'needs 2 GPUs or more'),
             rule,
             (f'{len(failed)} of {len(results)} steps failed: '
              + ', '.join(r.step.title for r in failed)) if failed
             else f'all {len(results)} steps passed']
    return [fit(row, WIDTH) for row in rows]


def main(argv):
    if argv in (['-h'], ['--help']):
        print(__doc__)
        return 0
    jobs_only = argv == ['--jobs-only']
    if argv and not jobs_only:
        print(f'gpu_check.py takes only --jobs-only (got {" ".join(argv)}): run it as '
              '`make gpu-check`.', file=sys.stderr)
        return 2
    num_gpus = gpu_count()
    if num_gpus == 0:
        print('No GPU that PyTorch can use (torch.cuda.is_available() is False): '
              'nothing to check.', flush=True)
        return 0
    info = gpu_info()
    print(f"GPU check on {info['gpus']}, CUDA {info['cuda']}", flush=True)
    results = []
    for step in steps_for(num_gpus, jobs_only):
        results.append(run_step(step))
        print(step_line(results[-1]), flush=True)
    print('\n'.join(summary(info, results, num_gpus)), flush=True)
    for r in results:
        if not r.ok and r.output:
            tail = '\n'.join(r.output.rstrip().splitlines()[-TAIL_LINES:])
            print(f'\n--- {r.step.title}: the end of its output ---\n{tail}')
    return 1 if any(not r.ok for r in results) else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
