"""Comparison reports over finished runs: tables in the papers' shape and figures.

Free of Ray and torch on purpose: a report is built on a laptop from copied run directories.
"""
