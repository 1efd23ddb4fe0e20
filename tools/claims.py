"""The table both speed tools print: ratios, each with the target the text claims.

A row is (measure, ratio, target, check): a row without a ratio is a heading; a row
with a check is a claim of the text, one without is printed next to its goal (a target
in parentheses) only. Missed claims are named again last; with --check (make speed)
they make the exit status 1.
"""
NAME_WIDTH = 52  # a row: 3 + 52 + 1 + 7 + 2 + 16 + 1 + 6 = 88 columns


def judge(rows):
    """The rows whose check fails, each as 'heading: measure'."""
    missed, heading = [], ''
    for name, value, _, check in rows:
        if value is None:
            heading = name.split(',')[0].split(':')[0].split(' (')[0]
        elif check is not None and not check(value):
            missed.append(f'{heading}: {name}')
    return missed


def print_table(rows):
    """The table of ratios, each with its target and met or MISSED; how many met."""
    print()
    print(f'{"measure":<{NAME_WIDTH + 3}} {"ratio":>7}  {"target":<16} met')
    for name, value, target, check in rows:
        if value is None:
            print(f'-- {name}')
            continue
        met = '' if check is None else ('met' if check(value) else 'MISSED')
        print(f'   {name:<{NAME_WIDTH}} {value:7.2f}  {target:<16} {met}'.rstrip())
    claims = sum(value is not None and check is not None for _, value, _, check in rows)
    print(f'{claims - len(judge(rows))} of {claims} claims met')


def verdict(rows, check):
    """Print the missed claims last (a log's end names them); 1 if check and any."""
    missed = judge(rows)
    for name in missed:
        print(f'MISSED: {name}')
    return 1 if check and missed else 0
