"""GraphGate's admin console (mounted at /admin/)."""
