"""Fault injection: the plan (``plan``), how a client strikes its own entries
(``client_side``) and how the driver carries out the rest (``driver_side``)."""

# The plan's entries are declared in the config, which imports them back from here:
# importing the config first lets either side be imported first.
import ring_actors.config  # noqa: F401
