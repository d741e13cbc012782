"""The reliability probe (issue 14): a declarative table of probes (``probes.py``) run by ``tools/reliability.py``."""
