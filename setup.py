"""Install the auto-tuning compiler: packages autotune, schedules, cost_model, records."""

from setuptools import find_packages, setup

setup(
    name="autotune",
    version="0.1.0",
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
    ],
    extras_require={
        "cuda": ["pycuda>=2024.1"],
        "test": ["pytest>=7", "ruff>=0.4"],
    },
    entry_points={
        "console_scripts": [
            "autotune-tune=autotune.cli.tune:main",
            "autotune-bench=autotune.cli.bench:main",
        ]
    },
)
