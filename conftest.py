# Keep `python -m pyjlad`'s entry module out of doctest collection (it calls sys.exit).
collect_ignore = ["pyjlad/__main__.py"]


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", default=False,
                     help="run every variant of the heaviest parametrized tests (tests/sampled_tests.py); "
                          "without it one in two or three runs")


def pytest_collection_modifyitems(config, items):
    """Deselect the variants tests/sampled_tests.py leaves out of the default run (reported as deselected)."""
    if config.getoption("--full"):
        return
    from sampled_tests import left_out

    out = left_out([item.nodeid for item in items])
    if out:
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in out])
        items[:] = [item for item in items if item.nodeid not in out]
