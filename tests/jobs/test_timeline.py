"""One DDP step on a 200 Mbit/s wire, profiled: buckets overlap backward, one does not.

A real 2-process torchrun job (tests/jobs/timeline_job.py) on 6 Linear(1024, 1024)
layers, batch 1024, about 2 s a step on this wire; profiled after two warm-up steps.
"""
from pathlib import Path

import pytest
import torch

from data_parallel import launch
from data_parallel.results import read_result

pytestmark = [pytest.mark.slow,  # starts a torchrun job (about 30 s)
              pytest.mark.skipif(torch.cuda.device_count() >= 2,
                                 reason='gloo on the CPU: NCCL ignores the wire')]

SCRIPT = Path(__file__).with_name('timeline_job.py')
ONE_BUCKET_MB, BUCKET_MB = 1e4, 1.0  # every gradient in one bucket; 4 MiB layers


def of_kind(spans, kind):
    return [s for s in spans if s['kind'] == kind]


def test_buckets_overlap_backward_and_one_bucket_waits_for_it(throttle):
    command = launch.torchrun_command(['--bucket-mb', ONE_BUCKET_MB, BUCKET_MB],
                                      script=SCRIPT)
    out, = launch.launch(command, bandwidth=200e6, timeout=300)
    record = read_result(out)
    for variant in record.values():
        assert [s['kind'] for s in variant['spans'] if s['kind'] != 'allreduce'] == [
            'forward', 'backward', 'optimizer'], variant
    buckets, one = record[str(BUCKET_MB)]['spans'], record[str(ONE_BUCKET_MB)]['spans']
    # several buckets: the first is on the wire before backward has finished
    backward_end = of_kind(buckets, 'backward')[-1]['end_ms']
    assert any(s['start_ms'] < backward_end for s in of_kind(buckets, 'allreduce')), \
        buckets
    assert len(of_kind(buckets, 'allreduce')) > 1, buckets
    # one bucket: it can only be sent once every gradient is computed
    backward_end = of_kind(one, 'backward')[-1]['end_ms']
    assert all(s['start_ms'] >= backward_end for s in of_kind(one, 'allreduce')), one
    assert len(of_kind(one, 'allreduce')) == 1, one
