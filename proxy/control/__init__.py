"""The control plane: what a gateway is configured with at run time (knowledge bases, API keys,
knowledge models, ended console sessions, the playground's pending answers), kept apart from the
knowledge store. It imports only proxy/core/."""
