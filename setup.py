"""Builds kiln's one C extension: the PEP 523 frame-evaluation hook."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kiln.capture._eval_frame",
            sources=["kiln/capture/_eval_frame.c", "kiln/capture/_guard_gate.c"],
            extra_compile_args=["-O2", "-Wno-unused-function"],
        )
    ]
)
