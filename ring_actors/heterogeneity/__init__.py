"""Heterogeneous clients, links and availability, for any method and topology.

Real federations mix devices an order of magnitude apart in speed, links from a LAN to a
slow home uplink, and clients that come and go. This module turns the config's
``heterogeneity`` section (or a trace file) into three deterministic, seeded facts every
client computes alike:

- **compute**: a speed factor per client (1 = as fast as the host; 4 = four times slower).
  A round's measured training time ``t`` is followed by ``(factor - 1) * t`` of sleep,
  outside any compute slot, so the wait costs no core;
- **links**: a latency and a bandwidth per directed link, so a hop of ``B`` bytes reaches
  its receiver ``latency + B / bandwidth`` seconds after it is sent (after the hops queued
  before it on that link), inside the hop timeout that the send is acknowledged within;
- **availability**: periods a client is offline, in seconds of the run (the coordinator's
  clock, the same for every client). An offline client leaves the ring after the round it is
  in, keeps everything it holds, and takes its place again when it comes back.

Trace file (JSON), every part optional; client ids are the run's: integers (as object keys,
their decimal text such as "3"); every value a finite number (not true, not a string) within
its bound (``trace_file.py``: a latency up to 600 s, a bandwidth from 1 byte/s, a speed factor
up to 10,000, an off period ending within a year); null in a matrix or a link entry leaves the
section's value::

    {
      "compute": {"0": 1.0, "5": 8.0},                      # speed factor per client
      "links": [{"from": 0, "to": 1, "latency_s": 0.05,      # per directed link; or
                 "bandwidth_bytes_s": 1.25e6}],
      "latency_s": [[0, 0.02], [0.02, 0]],                   # matrices, row = sender
      "bandwidth_bytes_s": [[0, 1e7], [1e7, 0]],
      "availability": {"3": [[10.0, 25.0], [60.0, 70.0]]}    # offline [from_s, to_s)
    }

A trace's entries replace the drawn ones for the clients and links it names. FedScale's
published device traces convert to this format (``ring_actors/heterogeneity/fedscale.py``).
"""
