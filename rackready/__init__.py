"""rackready: provision and prove 8-GPU training servers."""

__version__ = "0.1.0"
