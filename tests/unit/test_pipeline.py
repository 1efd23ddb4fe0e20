"""data_parallel.pipeline at p and m that chapter 12 does not run (m < p among them),
and its figure; chapter 12 checks the formulas and the orders torch runs."""
import types

import pytest
import torch

import data_parallel as dp
from data_parallel import pipeline as pp
from data_parallel.jobs import pp_workers
from tests.unit.helpers import texts

# not chapter 12's (2, 4), (3, 5), (4, 8); (4, 4) is tests/mutations' unit test
CASES = [(1, 3), (2, 1), (4, 4), (5, 2), (8, 16)]


@pytest.mark.parametrize('schedule', ['gpipe', '1f1b'])
@pytest.mark.parametrize('p, m', CASES)
@pytest.mark.parametrize('backward', [1, 2, 3])
def test_simulated_idle_share_is_the_formula(schedule, p, m, backward):
    table = pp.simulate(schedule, p, m, backward=backward)
    length = max(end for actions in table.values() for _, end, _, _ in actions)
    assert length == (m + p - 1) * (1 + backward)
    assert pp.idle_times(table) == [(p - 1) * (1 + backward)] * p
    share = sum(pp.idle_times(table)) / (p * length)
    assert share == pytest.approx(pp.bubble_fraction(p, m), abs=1e-12)


@pytest.mark.parametrize('schedule', ['gpipe', '1f1b'])
@pytest.mark.parametrize('p, m', CASES)
def test_every_stage_runs_each_micro_batch_once_and_respects_dependencies(
        schedule, p, m):
    table = pp.simulate(schedule, p, m)
    ends = {(s, kind, i): end for s, actions in table.items()
            for _, end, kind, i in actions}
    for s, actions in table.items():
        assert sorted((kind, i) for _, _, kind, i in actions) == sorted(
            [('F', i) for i in range(m)] + [('B', i) for i in range(m)])
        for (start, end, kind, i), after in zip(actions, actions[1:]):
            assert end <= after[0]  # one action at a time
        for start, _, kind, i in actions:
            if kind == 'F' and s > 0:
                assert start >= ends[s - 1, 'F', i]
            if kind == 'B':
                assert start >= ends[(s + 1, 'B', i) if s < p - 1 else (s, 'F', i)]


@pytest.mark.parametrize('p, m', CASES)
def test_gpipe_holds_every_micro_batch_and_1f1b_at_most_p(p, m):
    for s in range(p):
        assert pp.activations_held(pp.stage_order('gpipe', s, p, m)) == m
        assert pp.activations_held(pp.stage_order('1f1b', s, p, m)) == min(p - s, m)


def test_unknown_schedule_is_one_line():
    with pytest.raises(ValueError, match="schedule='zb': pass 'gpipe' or '1f1b'"):
        pp.stage_order('zb', 0, 2, 2)


def test_stage_layers_split_the_model_into_contiguous_runs():
    net, X = dp.deep_mlp(hidden=8, layers=6), torch.randn(3, 784)  # 8 layers
    for p in (1, 2, 3, 8):  # chapter 12 splits it over p = 4
        stages = [pp.stage_layers(net, s, p) for s in range(p)]
        assert [layer for stage in stages for layer in stage] == list(net)
        assert max(map(len, stages)) - min(map(len, stages)) <= 1
        assert torch.equal(torch.nn.Sequential(*stages)(X), net(X))  # one after another
    with pytest.raises(ValueError, match='p=9: a model of 8 layers has 1 to 8 stages'):
        pp.stage_layers(net, 0, 9)


def test_schedule_figure_draws_every_action_and_refuses_bad_input():
    tables = {'GPipe': pp.simulate('gpipe', 3, 2), '1F1B': pp.simulate('1f1b', 3, 2)}
    labels = texts(dp.plot_pipeline_schedule(tables, title='p = 3, m = 2'))
    assert sorted(labels) == sorted(2 * [f'{k}{i}' for k in 'FB' for i in range(2)] * 3)
    with pytest.raises(ValueError, match='tables: give'):
        dp.plot_pipeline_schedule({})


def test_the_jobs_order_reads_actions_of_any_torch_release(monkeypatch):
    """order_of reads an action's repr ('0F3'), which torch's releases share; the enum
    behind it has letters for values in 2.14 and may not elsewhere (integers here)."""
    kinds = {1: 'F', 2: 'B', 12: 'REDUCE_GRAD'}  # an older release's integer values

    class Action:  # torch's _Action as such a release builds it
        def __init__(self, kind, index):
            self.computation_type = types.SimpleNamespace(value=kind)
            self.microbatch_index = index

        def __repr__(self):
            return f'0{kinds[self.computation_type.value]}{self.microbatch_index}'
    schedule = types.SimpleNamespace(pipeline_order={0: [
        Action(1, 0), None, Action(1, 1), Action(2, 0), Action(12, 0), Action(2, 1)]})
    monkeypatch.setattr(pp_workers.dist, 'get_rank', lambda: 0)
    assert pp_workers.order_of(schedule) == ['F0', 'F1', 'B0', 'B1']
