"""Shared pytest configuration."""


def pytest_configure(config):
    config.addinivalue_line("markers", "ovs: needs root and a running Open vSwitch (userspace bridges are created)")
    config.addinivalue_line("markers", "mininet: needs root, Open vSwitch and Mininet (builds emulated fabrics)")
