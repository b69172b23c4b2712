"""The graphgate command line."""
