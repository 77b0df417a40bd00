"""Proofs over compiled tables: the reference pipeline, the vectorised engine, all-pairs, CDG, sweeps."""
