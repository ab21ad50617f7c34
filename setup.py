"""The compiled BM25 kernel (dream_assets/text/_bm25kernel.c); everything else is declared in pyproject.toml.

The extension is optional: without a C compiler the install still succeeds and the index uses its numpy path, which
gives the same results more slowly.
"""

import sys

from setuptools import Extension, setup

# No floating-point contraction: the kernel's scores must be bit for bit those of the numpy path.
flags = [] if sys.platform == "win32" else ["-O2", "-ffp-contract=off", "-fno-fast-math"]

setup(
    ext_modules=[
        Extension(
            "dream_assets.text._bm25kernel",
            ["dream_assets/text/_bm25kernel.c"],
            extra_compile_args=flags,
            optional=True,
        )
    ]
)
