"""A timeline of one training step, read from torch.profiler: do allreduces overlap?

What torch.profiler (CPU activity) records of a DDP step on gloo, seen in torch 2.14:

- ``DistributedDataParallel.forward`` on the calling thread: DDP's forward;
- ``autograd::engine::evaluate_function: <node>`` for each autograd node of backward,
  on the calling thread; the ``torch::autograd::AccumulateGrad`` nodes store a gradient
  and, under DDP, copy it into its bucket and launch the bucket's allreduce when it is
  the bucket's last one;
- ``c10d::allreduce_`` on the calling thread: only the launch (a bucket put on gloo's
  queue, well under 5 ms);
- ``gloo:all_reduce`` on one of gloo's worker threads (two by default): from when a
  worker takes the bucket off the queue until the summed bucket is back. That is the
  real duration: ProcessGroupGloo starts this record in AsyncWork::execute and ends it
  when the work finishes, and a comm hook's ``fut.then`` fired within 1 ms of each end;
  the wait in the queue, from the launch to then, is not in it;
- ``Optimizer.step#SGD.step`` (``Optimizer.step#<class>.step`` for any optimiser).

Every span here comes from the profiler; no hook is installed. With NCCL the CPU
activity would show only the launches: this reads gloo's allreduces.
"""
STEP = 'timeline: step'  # our own record around the step: time 0 of every span
KINDS = ('forward', 'backward', 'allreduce', 'optimizer')
NODE = 'autograd::engine::evaluate_function: '
STORE = 'torch::autograd::AccumulateGrad'  # stores a gradient, computes none


def kind_of(name):
    """The kind of a profiler event that the timeline shows, or None."""
    if name == 'DistributedDataParallel.forward':
        return 'forward'
    # backward is the nodes that compute gradients: a lone bucket is launched inside
    # the AccumulateGrad node after the last of them, and would look like overlap
    if name.startswith(NODE) and not name.endswith(STORE):
        return 'backward'
    if name == 'gloo:all_reduce':
        return 'allreduce'
    if name.startswith('Optimizer.step#'):
        return 'optimizer'
    return None


def spans_of(events):
    """The timeline of profiler events that hold one STEP record, ms from its start."""
    step, = [e for e in events if e.name == STEP]
    t0 = step.time_range.start  # microseconds

    def span(name, kind, start, end):
        return {'name': name, 'kind': kind, 'start_ms': (start - t0) / 1e3,
                'end_ms': (end - t0) / 1e3}

    spans, passes = [], {}
    forwards = sorted(e.time_range.start for e in events
                      if kind_of(e.name) == 'forward')
    for e in events:
        kind, start, end = kind_of(e.name), e.time_range.start, e.time_range.end
        if kind == 'backward':  # one span per backward pass, not one per node
            after = sum(f <= start for f in forwards)  # the forward it follows
            passes.setdefault(after, []).append((start, end))
        elif kind:
            spans.append(span(e.name, kind, start, end))
    for nodes in passes.values():
        spans.append(span(f'backward: {len(nodes)} autograd nodes', 'backward',
                          min(s for s, _ in nodes), max(e for _, e in nodes)))
    return sorted(spans, key=lambda s: (s['start_ms'], s['end_ms']))


def profile_step(step, *step_args):
    """Run step(*step_args) once under torch.profiler; its spans, ms since it began."""
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(STEP):
            step(*step_args)
    return spans_of(prof.events())


def overlap_ms(spans, kind='allreduce', during='backward'):
    """Milliseconds of the `during` spans in which at least one span of kind ran."""
    busy = []  # the union of the kind's spans: allreduces run two at a time on gloo
    for s in sorted((s for s in spans if s['kind'] == kind),
                    key=lambda s: s['start_ms']):
        if busy and s['start_ms'] <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], s['end_ms'])
        else:
            busy.append([s['start_ms'], s['end_ms']])
    return sum(max(0.0, min(end, b['end_ms']) - max(start, b['start_ms']))
               for start, end in busy for b in spans if b['kind'] == during)
