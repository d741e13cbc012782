# Keep `python -m pyjlad`'s entry module out of doctest collection (it calls sys.exit).
collect_ignore = ["pyjlad/__main__.py"]
