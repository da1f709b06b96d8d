"""The coordinator, with no Ray in it: membership, health, results, the run summary, tracking."""
