"""Declarative quantizers."""
