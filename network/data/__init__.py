"""Data files shipped with the network package."""
