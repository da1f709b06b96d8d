"""Fault injection: the plan (``plan``), how a client strikes its own entries
(``client_side``) and how the driver carries out the rest (``driver_side``)."""
