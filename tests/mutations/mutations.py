"""Mutation testing: plant each bug the book warns about, and see which checks notice.

A mutation replaces text exactly once in a package module and in the #@save cell that
mirrors it, in a copy of book/ and tests/ whose package goes first on PYTHONPATH. Each
copy runs its unit tests, then its chapters' checks, until one fails: make test would
catch the bug there. The unmutated copies, the control, run the unit tests and every
selection in two pytest processes, beside the mutated copies, and must pass each check
that caught one.
"""
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from tests import chapters

# the checkout this file lies in (tests/mutations/): what the copies are made of
ROOT = Path(__file__).resolve().parents[2]
# _toc.yml: repo_root() needs it, so that jobs in the copy run and write in the copy
COPIED = ['book', 'tests', '_toc.yml', '_config.yml', 'pytest.ini']
# (*.egg-info: pip's build metadata, rewritten when a test builds the package)
SKIPPED = shutil.ignore_patterns('__pycache__', '.ipynb_checkpoints', '_build',
                                 'browser', '*.egg-info')
NBVAL = ['--nbval', '--nbval-current-env', '--nbval-sanitize-with',
         'tests/nbval_sanitize.cfg', '--nbval-cell-timeout=600']
PROBE_FAILED = 97  # exit code of a run that imported the wrong data_parallel
# JUnit XML writes the escape character of terminal colours as the text '#x1B'
ANSI = re.compile(r'(\x1b|#x1B)\[[0-9;]*m')
EXCEPTION = re.compile(r'^[A-Za-z_][\w.]*(Error|Exception|Exit)\b')


class HarnessError(RuntimeError):
    """The harness itself is broken (rotted mutation or selection, wrong import)."""


@dataclass(frozen=True)
class Mutation:
    """One planted bug: replace old by new in the package module and its #@save cell."""
    name: str
    bug: str
    module: str
    old: str
    new: str
    unit: tuple
    chapters: tuple
    saved: bool = True  # False: a job's code, in no #@save cell (its listing is prose)
    # ((chapter, tag), ...): in that chapter the mutated copy runs only the cells
    # tagged so (a `checks-<group>` tag), not the chapter's `checks` cells
    checks: tuple = ()


CH = {int(path.name[:2]): path.name for path in chapters.CHAPTERS}  # CH[6]: chapter 6
SCRATCH_TESTS = ('tests/unit/test_scratch.py',)
# the ring's mutation runs the one unit test of it (performance.py's: chapters 6, 8)
PERF_TESTS = 'tests/unit/test_performance.py::'
# chapter 10's four ways at 200 Mbit/s: the bytes per example of each variant
WAYS = ((CH[10], 'checks-ways'),)
# chapter 6's k devices against 1 after one step: the from-scratch bugs show there
ONE_STEP = ((CH[6], 'checks-one-step'),)
# chapter 9's ZeRO-1 job against DDP, and the bytes its jobs put on the sockets (its
# hidden cells check them; tests/jobs/test_shard_workers.py only the k it does not run)
ZERO1, BYTES = ((CH[9], 'checks-zero1'),), ((CH[9], 'checks-bytes'),)
COST_MODEL = ((CH[8], 'checks-cost-model'),)
# chapter 11's split layers against one device (the test spawns two processes)
TP_TEST = ('tests/unit/test_tensor_parallel.py::test_split_layers_equal_one_device_'
           'in_output_and_gradients[2]',)
# chapter 12's schedules, and its bubble by formula
SCHEDULE = ((CH[12], 'checks-schedule'),)
# chapter 14's split layer against one process (its job starts two processes)
EXPERTS = ((CH[14], 'checks-ep'),)

MUTATIONS = [
    Mutation('a-get_params-no-copy',
             'get_params without copy=True: replicas on one device share storage',
             'scratch.py', 'p.detach().to(device, copy=True)', 'p.detach().to(device)',
             SCRATCH_TESTS, (CH[4], CH[6]), checks=ONE_STEP),
    Mutation('b-allreduce-rebinds-broadcast',
             "allreduce rebinds the broadcast loop's list entries (d2l's bug)",
             'scratch.py', 'data[i][:] = data[0].to(data[i].device)',
             'data[i] = data[0].to(data[i].device)', SCRATCH_TESTS, (CH[4], CH[6]),
             checks=ONE_STEP),
    Mutation('c-split_batch-drops-remainder',
             'split_batch drops the len(X) % k examples of an uneven batch',
             'scratch.py',
             'X_shards = torch.tensor_split(X, len(devices))\n'
             '    y_shards = torch.tensor_split(y, len(devices))',
             'kept = len(X) - len(X) % len(devices)\n'
             '    X_shards = torch.tensor_split(X[:kept], len(devices))\n'
             '    y_shards = torch.tensor_split(y[:kept], len(devices))',
             SCRATCH_TESTS, (CH[5], CH[6]), checks=ONE_STEP),
    Mutation('d-sgd-divides-by-shard',
             'train_batch: each replica divides its gradient by its shard size',
             'scratch.py',
             'for params in device_params:\n        sgd(params, lr, X.shape[0])',
             'for params, X_shard in zip(device_params, X_shards):\n'
             '        sgd(params, lr, len(X_shard))',
             SCRATCH_TESTS, (CH[6],), checks=ONE_STEP),
    Mutation('e-ring-skips-a-hop',
             'ring_allreduce: reduce-scatter takes k - 2 hops instead of k - 1',
             'collectives.py', 'for step in range(k - 1):  # reduce-scatter',
             'for step in range(k - 2):  # reduce-scatter',
             (PERF_TESTS + 'test_ring_and_star_equal_torch_all_reduce',), (CH[8],)),
    Mutation('f-flat-serial-path-one-device',
             'train_batch_flat without a pool: forward and backward on device 0 only',
             'performance.py',
             'for X_shard, y_shard, replica in zip(X_shards, y_shards, replicas):\n'
             '            forward_backward(X_shard, y_shard, replica)\n'
             '    else:  # one thread per device: the devices work at the same time',
             'for X_shard, y_shard, replica in zip(X_shards, y_shards, replicas[:1]):\n'
             '            forward_backward(X_shard, y_shard, replica)\n'
             '    else:  # one thread per device: the devices work at the same time',
             (), (CH[8],),
             checks=((CH[8], 'checks-flat'),)),
    Mutation('r-threads-take-turns',
             'train_batch_flat with a pool: each device waits for the one before it',
             'performance.py',
             '    else:  # one thread per device: the devices work at the same time\n'
             '        list(pool.map(forward_backward, X_shards, y_shards, replicas))',
             '    else:  # one thread per device: the devices work at the same time\n'
             '        for shard in zip(X_shards, y_shards, replicas):\n'
             '            pool.submit(forward_backward, *shard).result()',
             (), (CH[6],)),
    Mutation('g-cost-model-without-communication',
             'step_seconds drops the allreduce term: compute alone',
             'performance.py',
             'return compute_seconds + '
             'allreduce_seconds(num_values, k, bytes_per_second)',
             'return compute_seconds', (), (CH[8],),
             checks=COST_MODEL),
    Mutation('h-cost-model-star-traffic',
             "allreduce_seconds: the star's 2(k - 1)N, not the ring's 2(k - 1)/k N",
             'performance.py',
             'return 2 * (k - 1) / k * num_values * bytes_per_value / bytes_per_second',
             'return 2 * (k - 1) * num_values * bytes_per_value / bytes_per_second',
             (), (CH[8],), checks=COST_MODEL),
    Mutation('i-zero1-skips-all-gather',
             'zero1_step updates its own shard and never all-gathers the parameters',
             'sharding.py',
             '    ring_all_gather(replica.data)  '
             '# every rank again holds all parameters\n',
             '', (), (CH[9],), checks=ZERO1),
    Mutation('j-zero1-per-rank-divisor',
             "the ZeRO-1 job divides the summed gradient by the rank's batch, not the "
             'full one',
             'jobs/shard_workers.py',
             'sharding.zero1_step(replica, momentum, args.lr, args.batch_size,',
             'sharding.zero1_step(replica, momentum, args.lr,\n' + ' ' * 32
             + 'args.batch_size // dist.get_world_size(),',
             (), (CH[9],), saved=False, checks=ZERO1),
    Mutation('k-fsdp-built-as-ddp',
             "the `fsdp` variant is built as DDP: every rank keeps everything",
             'jobs/shard_workers.py', "    if impl == 'fsdp':\n",
             "    if impl == 'fully sharded':\n", (), (CH[9],), saved=False,
             checks=((CH[9], 'checks-fsdp'),)),
    Mutation('l-resume-loads-nothing',
             'load_snapshot finds the snapshot and reads nothing from it',
             'jobs/dcp_snapshot.py',
             'dcp.load(state, checkpoint_id=path)  '
             '# each rank reads the shards it owns',
             'pass  # the snapshot is never read', (), (CH[9],), saved=False,
             checks=((CH[9], 'checks-resume'),)),
    Mutation('m-all-gather-as-allreduce',
             'ring_all_gather zeroes the other shards and allreduces the whole tensor: '
             'right values, twice the bytes',
             'collectives.py',
             '    for step in range(k - 1):  '
             '# pass on what arrived in the previous hop\n'
             '        send, recv = chunks[(rank - step) % k], '
             'chunks[(rank - step - 1) % k]\n',
             '    for i, chunk in enumerate(chunks):\n'
             '        if i != rank:\n'
             '            chunk.zero_()\n'
             '    dist.all_reduce(tensor)\n'
             '    for send, recv in []:  # no hops: the exchange below never runs\n',
             (), (CH[9],), checks=BYTES),
    Mutation('n-fsdp-keeps-blocks-gathered',
             "FSDP2 keeps each block gathered after forward: the model's 1.5x DDP's "
             "traffic, not gloo's 2x",
             'jobs/shard_workers.py',
             'fully_shard(block, mesh=mesh, reshard_after_forward=args.reshard)',
             'fully_shard(block, mesh=mesh, reshard_after_forward=False)', (),
             (CH[9],), saved=False, checks=BYTES),
    Mutation('o-fp16-hook-sends-everything',
             "the `fp16` variant registers DDP's plain allreduce hook: 4 bytes a value",
             'jobs/wire_workers.py',
             'ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)',
             'ddp.register_comm_hook(None, default_hooks.allreduce_hook)',
             (), (CH[10],), saved=False, checks=WAYS),
    Mutation('p-accumulation-syncs-every-micro-batch',
             'gradient accumulation without no_sync(): every micro-batch is allreduced',
             'jobs/wire_workers.py', '            with ddp.no_sync():\n',
             '            if True:  # no no_sync(): DDP sends after every backward\n',
             (), (CH[10],), saved=False, checks=WAYS),
    Mutation('q-use_one_core-does-nothing',
             'use_one_core leaves PyTorch its intra-op threads: CPU processes that '
             'should be one core each fight over the cores',
             'devices.py',
             "    if device.type == 'cpu':\n        torch.set_num_threads(1)\n",
             '    pass  # the device model forgotten\n',
             ('tests/unit/test_devices.py::test_get_devices_with_simulated_gpus',),
             (CH[6], CH[8]), saved=False, checks=((CH[8], 'checks-one-core'),)),
    # chapter 11: tensor parallelism
    Mutation('tp-row-parallel-skips-g',
             'RowParallelLinear adds its partial sum without the all-reduce of g',
             'tensor_parallel.py',
             'return ReduceFromParallel.apply(F.linear(X, self.weight)) + self.bias',
             'return F.linear(X, self.weight) + self.bias', TP_TEST, (CH[11],)),
    Mutation('tp-f-backward-skips-all-reduce',
             "f's backward returns this rank's part of the input's gradient: output "
             "and the pair's own gradients stay right",
             'tensor_parallel.py', '        dist.all_reduce(grad)\n', '',
             TP_TEST, (CH[11],)),
    Mutation('tp-conv-gathers-along-batch',
             "channel_parallel_conv joins the ranks' channels along the batch "
             'dimension',
             'tensor_parallel.py', 'return torch.cat(pieces, dim=1)',
             'return torch.cat(pieces, dim=0)', TP_TEST, (CH[11],)),
    # chapter 12: pipeline parallelism
    Mutation('pp-1f1b-runs-all-forwards-first',
             "the '1F1B' order runs every forward before its first backward: GPipe's "
             'order, m micro-batches held on every stage',
             'pipeline.py',
             'warmup = min(p - 1 - stage, m)  # forwards in flight before the first',
             'warmup = m  # forwards in flight before the first',
             ('tests/unit/test_pipeline.py::test_gpipe_holds_every_micro_batch_and_'
              '1f1b_at_most_p[4-4]',), (CH[12],), checks=SCHEDULE),
    Mutation('pp-bubble-with-p-not-p-minus-1',
             'bubble_fraction counts p idle slots instead of p - 1: p/(m + p)',
             'pipeline.py', 'return (p - 1) / (m + p - 1)', 'return p / (m + p)',
             ('tests/unit/test_pipeline.py::test_simulated_idle_share_is_the_'
              'formula[2-4-4-gpipe]',), (CH[12],), checks=SCHEDULE),
    Mutation('pp-loss-not-divided-by-micro-batches',
             "the pipeline job's loss is each micro-batch's mean, not divided by m: "
             'gradients m times too large',
             'jobs/pp_workers.py',
             'return F.cross_entropy(output, y) / num_micro_batches',
             'return F.cross_entropy(output, y)', (), (CH[12],), saved=False,
             checks=((CH[12], 'checks-grads'),)),
    # chapter 14: expert parallelism
    Mutation('ep-dispatch-to-wrong-rank',
             "expert e's rows go to rank e % W, not e // (E / W), the rank that holds "
             'it: rows reach ranks without their expert',
             'experts.py', 'owner = chosen.flatten() // (num_experts // world_size)',
             'owner = chosen.flatten() % world_size', (), (CH[14],), checks=EXPERTS),
    Mutation('ep-combine-without-gates',
             "the combine adds the experts' outputs without their gates",
             'experts.py', 'weighted = gates.flatten()[order, None] * back',
             'weighted = back', (), (CH[14],), checks=EXPERTS),
    Mutation('ep-all-to-all-backward-skipped',
             "AllToAll's backward keeps the gradients of the rows it received instead "
             'of sending each back to the rank that sent the row',
             'experts.py',
             '        grad = all_to_all_rows(grad, ctx.receive, ctx.send)  # the splits '
             'swapped\n', '', (), (CH[14],), checks=EXPERTS),
    Mutation('moe-capacity-keeps-the-last-tokens',
             'a full expert keeps its last `capacity` tokens, not its first: as many '
             'dropped, the wrong ones',
             'experts.py',
             'taken = F.one_hot(chosen.flatten(), num_experts).cumsum(dim=0)',
             'taken = F.one_hot(chosen.flatten(), num_experts).flip(0).cumsum(dim=0)'
             '.flip(0)', (), (CH[14],), checks=((CH[14], 'checks-capacity'),)),
    Mutation('moe-splits-routers-not-reduced',
             "the side-by-side MoE network's replicated routers skip the all-reduce "
             'of their gradients: fewer bytes, the routers drift apart',
             'jobs/moe_workers.py',
             "        dist.all_reduce(grads)  # the replicated routers' gradients, in one\n",
             '', (), (CH[14],), saved=False, checks=((CH[14], 'checks-bytes'),)),
    # chapter 15: FSDP and tensor parallelism on a 2-D mesh (the job's checks-mesh)
    Mutation('mesh-tp-after-fully-shard',
             'tensor parallelism is applied after fully_shard instead of before',
             'jobs/mesh_workers.py',
             "    model = parallelize_module(model, mesh['tp'], pairs_plan(model))  "
             "# TP, then FSDP\n    fully_shard(model, mesh=mesh['dp'], "
             'mp_policy=policy or MixedPrecisionPolicy())\n',
             "    fully_shard(model, mesh=mesh['dp'], mp_policy=policy or "
             "MixedPrecisionPolicy())\n    model = parallelize_module(model, "
             "mesh['tp'], pairs_plan(model))\n", (), (CH[15],), saved=False,
             checks=((CH[15], 'checks-mesh'),)),
    Mutation('mesh-dims-swapped',
             "the mesh's dimensions are swapped: tensor-parallel pairs are ranks 0 "
             'and 2, not neighbours',
             'jobs/mesh_workers.py',
             "(2, 2), mesh_dim_names=('dp', 'tp'))\n    model = parallelize_module",
             "(2, 2), mesh_dim_names=('tp', 'dp'))\n    model = parallelize_module",
             (), (CH[15],),
             saved=False, checks=((CH[15], 'checks-mesh'),)),
    Mutation('mesh-2d-given-to-fully-shard',
             'the four-way FSDP layout hands fully_shard a 2-D mesh: HSDP, half the '
             'parameters replicated',
             'jobs/mesh_workers.py', "(4,), mesh_dim_names=('dp',))",
             "(2, 2), mesh_dim_names=('dp', 'tp'))", (), (CH[15],), saved=False,
             checks=((CH[15], 'checks-mesh'),)),
    Mutation('mesh-reduce-scatter-in-bf16',
             'the mixed-precision policy reduces the gradients in bf16, not fp32',
             'jobs/mesh_workers.py',
             'reduce_dtype=torch.float32)', 'reduce_dtype=torch.bfloat16)', (),
             (CH[15],), saved=False, checks=((CH[15], 'checks-mesh'),)),
]


def is_saved(cell):
    """Whether a cell is a code cell whose first line is #@save."""
    return (cell['cell_type'] == 'code'
            and chapters.text(cell).lstrip().startswith('#@save'))


def select_cells(cells, group='checks'):
    """Indices of the code cells a copy runs, in order.

    The setup (before the first `## ` heading), the #@save cells and those tagged
    `group`; every code cell when none is tagged `checks`.
    """
    code = [i for i, c in enumerate(cells) if c['cell_type'] == 'code']
    tagged = [i for i in code if group in cells[i]['metadata'].get('tags', [])]
    if not tagged and group == 'checks':
        return code
    if not tagged:
        raise HarnessError(f'no code cell is tagged {group!r}: tag the cells that '
                           'catch the mutation (tests/mutations/mutations.py)')
    if not any('assert' in chapters.text(cells[i]) for i in tagged):
        raise HarnessError(f'the cells tagged {group!r} hold no assert, so none can '
                           'fail: tag the hidden checks after them too')
    heading = next((i for i, c in enumerate(cells) if c['cell_type'] == 'markdown'
                    and chapters.text(c).startswith('## ')), len(cells))
    keep = {i for i in code if i < heading or is_saved(cells[i])}
    return sorted(keep | set(tagged))


def mutate_text(text, mutation, where):
    """text with the mutation applied; HarnessError unless old occurs exactly once."""
    count = text.count(mutation.old)
    if count != 1:
        raise HarnessError(f'{mutation.name}: {mutation.old!r} occurs {count} times in '
                           f'{where}, not once: update tests/mutations/mutations.py')
    return text.replace(mutation.old, mutation.new)


def mutate_chapters(notebooks, mutation):
    """Mutate the one #@save cell that holds old; its chapter (None if not saved)."""
    holders = [(name, cell) for name, nb in notebooks.items() for cell in nb['cells']
               if is_saved(cell) and mutation.old in chapters.text(cell)]
    if not mutation.saved and not holders:
        return None
    if len(holders) != 1 or not mutation.saved:
        raise HarnessError(f'{mutation.name}: {len(holders)} #@save cells hold '
                           f'{mutation.old!r}, not one: update the mutation')
    name, cell = holders[0]
    mutated = mutate_text(chapters.text(cell), mutation, name)
    cell['source'] = mutated.splitlines(keepends=True)
    return name


def trimmed(notebook, group, book):
    """The selection after a probe of the kernel's data_parallel; original indices."""
    probe = ('import data_parallel\n'
             f'assert data_parallel.__file__.startswith({str(book) + os.sep!r}), '
             'data_parallel.__file__\n')
    indices = select_cells(notebook['cells'], group)
    cells = [{'cell_type': 'code', 'execution_count': None, 'metadata': {},
              'outputs': [], 'source': probe}, *(notebook['cells'][i] for i in indices)]
    return {**notebook, 'cells': cells}, [None] + indices


def make_copy(folder, mutation=None):
    """Copy the repository's book/ and tests/ into folder, mutated; return the root."""
    root = Path(folder) / 'repo'
    for name in COPIED:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, root / name, ignore=SKIPPED)
        else:
            shutil.copy2(path, root / name)
    if mutation is not None:
        module = root / 'book' / 'data_parallel' / mutation.module
        module.write_text(mutate_text(module.read_text(), mutation, module.name))
    return root


def selection(mutation):
    """{chapter: the tag of the cells a copy runs}: the mutation's group, or checks."""
    return {chapter: dict(mutation.checks).get(chapter, 'checks')
            for chapter in mutation.chapters}


def write_selections(root, pairs, mutation=None):
    """Write each (chapter, group) selection, mutated if asked, as a notebook of its
    own; {file name: (place, original indices)}."""
    book = root / 'book'
    notebooks = {path.name: chapters.load(path)
                 for path in book.glob('[0-9][0-9]_*.ipynb')}
    if mutation is not None:  # the whole chapter, in case no selection replaces it
        name = mutate_chapters(notebooks, mutation)
        if name is not None:
            (book / name).write_text(json.dumps(notebooks[name]))
    written = {}
    for chapter, group in sorted(pairs):
        notebook, origins = trimmed(notebooks[chapter], group, book / 'data_parallel')
        name = f'{chapter[:-6]}--{group}.ipynb'
        (book / name).write_text(json.dumps(notebook))
        written[name] = (place(chapter, group), origins)
    return written


def environment(root):
    """os.environ with the copy's package first on PYTHONPATH, and the data folder."""
    import data_parallel as dp  # the checkout's own package: where the data lies
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE='1')
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(root / 'book'),
                                                      env.get('PYTHONPATH')]))
    env.setdefault(dp.DATA_ENV, str(dp.data_root()))
    # CPU only, on every machine: the planted bugs are about tensors that share storage,
    # which a copy from the CPU to a GPU never does, and the control must run the same
    # checks (chapter 6's one-device demo) wherever `make mutations` runs.
    env.update(dp.CPU_ONLY)
    return env


@dataclass
class Outcome:
    """What one check (unit tests, or one chapter's selection) did on one copy."""
    place: str
    failed: bool
    failures: list
    seconds: float


def why(message, details):
    """The gist of a failed test: its message, or for a cell what went wrong in it."""
    message, details = ANSI.sub('', message).strip(), ANSI.sub('', details)
    if not message.startswith('Notebook cell execution failed'):
        return (message.splitlines() or [''])[0][:100]
    if 'Cell outputs differ' in message + details:
        return 'outputs differ from the stored ones'
    lines = [line.strip() for line in details.splitlines()]
    raised = [line for line in lines if EXCEPTION.match(line)]
    return (raised or ['cell failed'])[-1][:100]


def cases(junit_xml):
    """(class, name, seconds, why of each failure) of the tests in a JUnit XML report."""
    for case in ElementTree.parse(junit_xml).getroot().iter('testcase'):
        problems = list(case.iter('failure')) + list(case.iter('error'))
        yield (case.get('classname', ''), case.get('name', ''),
               float(case.get('time') or 0),
               [why(p.get('message') or '', p.text or '') for p in problems])


def place(chapter, group):
    """How a chapter's selection is named in the matrix."""
    return f'{group} of {chapter[:-6]}'


def run_checks(root, unit, written, label, stop_first=False):
    """One pytest process over the unit tests and the selections written, after a
    check that it imports the copy's package; an Outcome for each."""
    slug = label.replace(' ', '-')
    report = root / f'junit-{slug}.xml'
    book = str(root / 'book' / 'data_parallel') + os.sep
    code = ('import sys, data_parallel, pytest\n'
            f'if not data_parallel.__file__.startswith({book!r}):\n'
            '    print("imported", data_parallel.__file__, "not the copy")\n'
            f'    sys.exit({PROBE_FAILED})\n'
            'sys.exit(pytest.main(sys.argv[1:]))\n')
    command = [sys.executable, '-c', code, '-q', '-p', 'no:cacheprovider',
               f'--junitxml={report}', f'--basetemp={root / f"tmp-{slug}"}',
               *(['-x'] if stop_first else []), *unit,
               *(NBVAL if written else []), *(f'book/{name}' for name in written)]
    done = subprocess.run(command, cwd=root, env=environment(root), capture_output=True,
                          text=True, timeout=1200)
    tail = '\n'.join((done.stdout + done.stderr).strip().splitlines()[-30:])
    if done.returncode not in (0, 1):
        raise HarnessError(f'{label}: pytest exited with {done.returncode}:\n{tail}')
    found = {place: Outcome(place, False, [], 0.0) for place, _ in written.values()}
    if unit:
        found['unit tests'] = Outcome('unit tests', False, [], 0.0)
    for file, name, seconds, whys in cases(report):
        place, origins = written.get(file.removeprefix('book.'), ('unit tests', None))
        outcome = found[place]
        outcome.seconds += seconds
        for message in whys:
            if origins is None:
                test = f"{file.split('.')[-1]}::{name}"
            else:  # nbval names items 'Cell <n>', code cells only
                test = origins[int(name.rsplit(' ', 1)[-1])]
                if test is None:
                    raise HarnessError(f'{file}: the kernel imported another package: '
                                       f'{message}')
                test = f'cell {test}'
            outcome.failed = True
            outcome.failures.append((test, message))
    if done.returncode == 1 and not any(o.failed for o in found.values()):
        raise HarnessError(f'{label}: pytest failed, naming no test:\n{tail}')
    return list(found.values())


def until_caught(calls):
    """Outcomes of calls in turn, up to the first that failed."""
    done = []
    for call in calls:
        done += call()
        if any(outcome.failed for outcome in done):
            break
    return done


def tasks(folder, mutation):
    """(label, call) of a mutated copy: its checks in turn, each stopped at its first
    failure (-x), the chapters only if the unit tests missed the bug."""
    root = make_copy(folder, mutation)
    written = write_selections(root, selection(mutation).items(), mutation)
    calls = [functools.partial(run_checks, root, mutation.unit, {}, 'unit tests',
                               True)] if mutation.unit else []
    calls += [functools.partial(run_checks, root, (), {name: where}, where[0], True)
              for name, where in written.items()]
    return [(mutation.name, functools.partial(until_caught, calls))]


def control(folder, unit, pairs, processes=2):
    """(label, call) of the unmutated copies: the unit tests and the selections, shared
    out over a few copies, one pytest process each."""
    pairs, found = sorted(pairs), []
    for i in range(min(processes, len(pairs)) or 1):
        root = make_copy(Path(folder) / str(i))
        found.append(('control', functools.partial(
            run_checks, root, tuple(unit) if i == 0 else (),
            write_selections(root, pairs[i::processes]), f'control {i}')))
    return found


def run_all(all_tasks, workers=2, report=lambda label, outcome: None):
    """{(label, place): Outcome} of every (label, call), `workers` at a time."""
    outcomes = {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        running = {pool.submit(call): label for label, call in all_tasks}
        for future in as_completed(running):
            label = running[future]
            for outcome in future.result():
                outcomes[label, outcome.place] = outcome
                report(label, outcome)  # as each ends
    return outcomes


def describe(outcome, expected_to_fail):
    """One line: place, verdict, seconds, and the first failures."""
    verdicts = ('MISSED', 'caught') if expected_to_fail else ('passed', 'FAILED')
    verdict = verdicts[outcome.failed]
    shown = '; '.join(f'{test}: {message}' if message else test
                      for test, message in outcome.failures[:3])
    more = f' (+{len(outcome.failures) - 3} more)' if len(outcome.failures) > 3 else ''
    return (f'    {outcome.place:<36} {verdict:<7} {outcome.seconds:4.0f} s  '
            f'{shown}{more}').rstrip()
