"""Prometheus metrics at GET /metrics: one ``Metrics`` per app (its own registry), held on the
gateway; events are recorded where they happen, the store's numbers are read at scrape time."""
