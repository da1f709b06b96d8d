"""``python -m benchmarks.exchange``: every part asked for, its rows printed as tables."""

from benchmarks.exchange import main

main()
