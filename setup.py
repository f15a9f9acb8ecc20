"""Install the auto-tuning compiler: packages autotune, schedules, cost_model, records."""

import re
from pathlib import Path

from setuptools import find_packages, setup

# the one definition of the version: autotune/__init__.py (``autotune --version`` prints it)
INIT = (Path(__file__).parent / "autotune" / "__init__.py").read_text()
VERSION = re.search(r'__version__ = "([^"]+)"', INIT)[1]

setup(
    name="autotune",
    version=VERSION,
    description="An auto-tuning tensor compiler: tensor expressions, schedule search, measured kernels",
    python_requires=">=3.10",
    packages=find_packages(include=["autotune", "autotune.*", "schedules", "schedules.*", "cost_model",
                                    "cost_model.*", "records", "records.*"]),
    install_requires=[
        "numpy>=1.24",
        # the CPU-only build ships the same `xgboost` module without the ~700 MB of NCCL
        "xgboost-cpu>=2.1",
        "scikit-learn>=1.3",
        "sqlite-utils>=3.35",
        "tqdm>=4.60",
        # the graph compiler's frontend (autotune.graph) imports ONNX models
        "onnx>=1.14",
    ],
    extras_require={
        "cuda": ["pycuda>=2024.1"],
        # onnxruntime: the reference the compiled models are checked and benchmarked against
        "test": ["pytest>=7", "ruff>=0.4", "onnxruntime>=1.16"],
        "plot": ["matplotlib"],  # scripts/bench_search.py tuning curves
        # tune.py --cluster / --workers: builds and runs as tasks of a Dask cluster
        "dask": ["dask[distributed]>=2024.1"],
        # bench.py --model --target cuda: the PyTorch eager / torch.compile baseline (GPU machines)
        "torch": ["torch"],
        # bench/gallery: torchvision / Hugging Face architectures exported by both PyTorch exporters
        # (onnxscript: the dynamo exporter), checked and timed against onnxruntime
        "models": ["torch", "torchvision", "transformers", "onnxscript", "onnxruntime>=1.16"],
    },
    entry_points={
        "console_scripts": [
            "autotune=autotune.cli.main:main",
            "autotune-tune=autotune.cli.tune:main",
            "autotune-bench=autotune.cli.bench:main",
            "autotune-compile=autotune.cli.compile:main",
            "autotune-db=autotune.cli.db:main",
        ],
        # torch.compile(model, backend="autotune") finds the backend here (with the [torch] extra)
        "torch_dynamo_backends": ["autotune = autotune.torch.backend:autotune_backend"],
    },
)
