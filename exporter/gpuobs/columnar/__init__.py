"""Columnar outputs: Parquet tables of recordings (parquet.py), their schema (tables.py)."""
