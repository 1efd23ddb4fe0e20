"""Checks on command-line arguments, shared by the programs that torchrun starts."""
import argparse


def at_least(minimum, kind):
    """An argparse type: a number of the given kind, at least minimum."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            noun = 'a whole number' if kind is int else 'a number'
            raise argparse.ArgumentTypeError(f'{text!r} is not {noun}') from None
        if not value >= minimum or value != value:
            raise argparse.ArgumentTypeError(
                f'{text} is too small: use at least {minimum}')
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
