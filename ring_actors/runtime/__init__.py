"""The Ray-facing shells: actors, the Ray transport, the driver, compute slots, worker settings.

The only folder that imports Ray; the cores it wraps (``client``, ``coordinator``,
``delivery``) are plain Python, so they run in one process as well (``in_process``).
"""
