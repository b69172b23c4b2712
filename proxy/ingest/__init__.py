"""The document pipeline: the durable queue from upload to merge, and the inbox folder."""
