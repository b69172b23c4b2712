"""The /rag JSON API: documents, queries and traces, graph curation, health."""
