"""A helper module for test_interpreter: a function that reads a global of its own module."""
SCALE = 2.0


def scaled(x):
    return x * SCALE
