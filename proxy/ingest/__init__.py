"""Ingestion: parsing, chunking, extraction and the document pipeline."""
