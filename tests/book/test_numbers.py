"""No stale numbers: a measured-looking number (a decimal, a percentage, a ratio "1.6x")
in the chapters' and the intro's text is glued, follows words naming a setting, or is in
CITED (with its source) or EXACT (with its arithmetic); an unused entry fails too."""
import re

import pytest

from tests.chapters import BOOK, CHAPTERS, load, text

# a decimal, a percentage, or "N x"/"Nx" written as a ratio (1.6x); 2 x 3 is arithmetic
NUMBER = re.compile(r'(?<![\w.])(\d[\d,]*\.\d+(?![\w.])|\d[\d,]*(?:\.\d+)?\s?%'
                    r'|\d[\d,]*(?:\.\d+)?x(?!\w))')
SETTING = re.compile(r'(?:learning rate(?: of)?|\blr(?: =)?|rate,|scale|momentum|'
                     r'PyTorch|d2l|section|address|instead of)\s*$', re.IGNORECASE)
SKIPPED = [re.compile(p, re.DOTALL) for p in (
    r'```.*?```',                  # code listings
    r'\{glue:[a-z]+\}`[^`]*`',     # glued values: updated by every execution
    r'`[^`]*`',                    # inline code
    r'\$\$.*?\$\$', r'\$[^$]*\$',  # math
    r'\]\([^)]*\)',                # link targets
)]

D2L_RUNS = "d2l's published runs of the Colab notebooks (d2l.ai, section 13.6/13.7)"
D2L_BUILDS = "d2l's records of 52 builds of 'multiple-gpus-concise'"
ZERO = 'Rajbhandari et al. (2020), ZeRO, Figure 1'
# (chapter, the words around the number as the text has them): the source
CITED = {
    ('06', 'reached 0.83 on one GPU and 0.84 on two'): D2L_RUNS,
    ('06', 'took 3.0 s per epoch on one GPU and 2.8 s on two'): D2L_RUNS,
    ('06', 'median speed-up was 1.00'): D2L_BUILDS.replace('multiple-gpus-concise',
                                                           'multiple-gpus'),
    ('07', '(3.0 s per epoch on one GPU, 2.8 s on two'): D2L_RUNS,
    ('07', 'measured 12.2 s per epoch on one GPU and 7.5 s on two'): D2L_RUNS,
    ('07', 'accuracy of 0.91 on one GPU and 0.73 on two'): D2L_BUILDS,
    ('07', 'median of 0.86, below 0.85 in 25'): D2L_BUILDS,
    ('08', '(3.0 s per epoch on one GPU, 2.8 s on two)'): D2L_RUNS,
    ('08', 'took 3.0 s per epoch on one GPU and 2.8 s on two, about'): D2L_RUNS,
    ('08', 'from 12.2 s to 7.5 s'): D2L_RUNS,
    ('09', 'about 1.5 times (Rajbhandari'): 'Rajbhandari et al. (2020), section 7',
    ('09', '120 GB, 31.4 GB, 16.6 GB and 1.9 GB'): ZERO,
    ('15', 'gives X &asymp; 13.9'): 'the Scaling Book, training.md (jax-ml/scaling-book '
                                    'dea4256), "Combining FSDP and Tensor Parallelism"',
}
# (chapter, the words around the number): the arithmetic that gives it
EXACT = {
    ('01', 'has 1.5 billion'): 'an exercise: the size it asks about',
    ('01', 'about 90% of'): "LeNet's MACs: 2.0 M of 2.25 M in the second convolution",
    ('01', 'less than 5% of'): "LeNet's MACs, as above",
    ('01', 'with about 5%'): "LeNet's MACs, as above",
    ('01', 'more than about 5%'): "LeNet's MACs, as above",
    ('01', 'does 95% of'): "LeNet's MACs, as above",
    ('03', 'rounds 4.5 down'): '(13 - 4) / 2 + 1, the pooling formula',
    ('03', 'about 2.0 of the 2.25'): "LeNet's MACs, counted from its shapes",
    ('03', 'rather than 2.3)'): 'log 10, the loss of a uniform guess',
    ('03', 'about 0.5 MiB'): '129,068 x 4 bytes',
    ('05', 'about 1.2 % of'): '1/86, from the shard sizes',
    ('06', 'plateau at 0.10, chance'): 'ten classes: chance level',
    ('06', 'chance level (10 %)'): 'ten classes: chance level',
    ('06', '79 % of the values'): "W3's share of LeNet's 129,068 parameters",
    ('07', "LeNet's 0.13 million"): '129,068 parameters',
    ('08', 'leave the 10 % plateau'): 'ten classes: chance level',
    ('08', 'are 0.5 MB in all'): '129,068 x 4 bytes',
    ('08', 'with 11.2 million'): "ResNet-18's parameters, an exercise's setting",
    ('08', 'bandwidth: 0.1 ms for LeNet'): "exercise 1's formula at 10 GB/s",
    ('08', 'its 7.5 ms of compute'): "exercise 1's 60 ms divided by k = 8",
    ('09', '| 1 | 1.5 |'): "the traffic model's table, 2(k - 1)/k at k = 2 and 4",
    ('09', '| 1.5 | 2.25 |'): "the traffic model's table, 3(k - 1)/k at k = 2 and 4",
    ('09', 'so it sends 1.5 times'): '3(k - 1)/k over 2(k - 1)/k',
    ('09', "about 1.5 times DP's"): "the model's 3(k - 1)/k over 2(k - 1)/k",
    ('09', "the model's 1.5 and 2.25"): "3(k - 1)/k at k = 2 and 4",
    ('09', 'and 1.5 at k = 4'): "an allreduce's 2(k - 1)/k at k = 4",
    ('09', 'rather than 1.5 times'): "the model's ratio",
    ('09', "1.5 times DP's traffic"): "the model's ratio",
    ('09', '7.5-billion-parameter'): "an exercise's setting (the ZeRO paper's model)",
    ('09', 'that is 0.5 x 4N'): '(k - 1)/k at k = 2',
    ('09', 'about lr = 0.001'): "Adam's step is bounded by its learning rate",
    ('02', '0.2 with 512 on two'): "a setting: d2l's learning rate for two GPUs",
    ('02', 'time it reaches 0.8'): 'a setting: the warm-up\'s final learning rate',
    ('02', 'Treat 0.8 as'): "a setting: the warm-up's final learning rate",
    ('06', 'below, 0.8 throws'): 'a setting: the largest learning rate tried',
}


def prose(markdown):
    """Markdown without code, math, link targets and glued values, spaces collapsed."""
    for pattern in SKIPPED:
        markdown = pattern.sub(' ', markdown)
    return ' '.join(markdown.split())


def chapter_texts():
    """{'NN': [the prose of each Markdown cell]} per chapter; 'intro': the intro's."""
    texts = {'intro': [prose((BOOK / 'intro.md').read_text())]}
    for path in CHAPTERS:
        texts[path.name[:2]] = [prose(text(c)) for c in load(path)['cells']
                                if c['cell_type'] == 'markdown']
    return texts


def unexplained(texts):
    """(offenders, as 'chapter: number in context'; list entries the text lacks)."""
    allowed = {**CITED, **EXACT}
    used, offenders = set(), []
    for chapter, cells in texts.items():
        entries = [words for where, words in allowed if where == chapter]
        for paragraph in cells:
            covered = [m.span() for words in entries  # the spans entries name
                       for m in re.finditer(re.escape(words), paragraph)]
            used |= {(chapter, words) for words in entries if words in paragraph}
            for m in NUMBER.finditer(paragraph):
                start, end = m.span()
                if SETTING.search(paragraph[max(0, start - 30):start]):
                    continue
                if not any(a <= start and end <= b for a, b in covered):
                    around = paragraph[max(0, start - 40):end + 20]
                    offenders.append(f'{chapter}: {m.group()!r} in "...{around}..."')
    return offenders, sorted(set(allowed) - used)


def test_every_number_in_the_text_is_glued_or_cited():
    offenders, unused = unexplained(chapter_texts())
    assert not offenders, ('neither glued nor cited (glue a measured value with '
                           'dp.glue and {glue:text}, or add a cited figure to CITED '
                           'with its source):\n' + '\n'.join(offenders))
    assert not unused, f'entries the text no longer holds: {unused}'


def test_every_allowed_number_says_where_it_comes_from():
    for entry, source in {**CITED, **EXACT}.items():
        assert NUMBER.search(entry[1]), entry  # the words name the number they allow
        assert len(source) > 10, entry


# A percentage is shown matched by the entries above ('79 % of the values'); a glued
# value or a setting wrongly caught would fail the test on the chapters themselves
@pytest.mark.parametrize('planted', ['Here one epoch took 1.84 s.',
                                     'Two processes were 1.7x as fast.'])
def test_a_planted_number_is_caught(planted):
    texts = chapter_texts()
    texts['07'].append(prose(planted))  # as if a Markdown cell of chapter 7 said it
    offenders, _ = unexplained(texts)
    assert len(offenders) == 1 and offenders[0].startswith('07: '), offenders
