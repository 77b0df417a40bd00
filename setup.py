"""hpcfabric: OpenFlow fabric controller for HPC interconnects on commodity Ethernet."""
from setuptools import find_packages, setup

setup(
    name="hpcfabric",
    version="0.1.0",
    description=(
        "OpenFlow SDN controller application that turns commodity Ethernet switches "
        "into an HPC interconnect (hierarchical MACs, DMP, compacted and conditional rules)"
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["hpcfabric", "hpcfabric.*"]),
    package_data={"hpcfabric.controller": ["webstatic/*.html", "webstatic/*.js", "webstatic/*.css"]},
    install_requires=[
        "networkx>=3.0",
        "PyYAML>=6.0",
        "numpy>=1.24",
        "numba>=0.60",
        "matplotlib>=3.6",
        "tqdm>=4.60",
        "prometheus_client>=0.17",
    ],
    extras_require={
        "controller": ["os-ken==3.1.0"],
        "test": ["pytest>=7", "selenium>=4.10"],
        "etcd": ["etcd3gw>=2.4"],
        "dask": ["distributed>=2024.1"],
    },
    entry_points={
        "console_scripts": [
            "hpcfabric=hpcfabric.cli:main",
            "hpcfabric-dmp=hpcfabric.protocols.dmp_client:main",
        ],
    },
)
