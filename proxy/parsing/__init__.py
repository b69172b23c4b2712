"""Parsing uploads into text (file types, decoding, HTML, bounded worker processes), and text into chunks."""
