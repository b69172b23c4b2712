"""GraphGate's knowledge base over the Model Context Protocol: the tools and resources
(``tools.py``), Streamable HTTP at ``/mcp`` on the gateway (``http.py``) and ``graphgate mcp``
over stdio (``stdio.py``, bridged to a running gateway by ``bridge.py``). docs/mcp.md."""
