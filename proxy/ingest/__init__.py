"""The document pipeline: chunking, the durable queue from upload to merge, the inbox folder."""
