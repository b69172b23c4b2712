"""Merging into the graph: the rules, recomputation, the pipeline's merge batches, curation by hand, suggestions."""
