"""Brute force over host pairs: the all-pairs verifier (``allpairs``) and the CDG oracle (``cdg`` over ``lines``)."""
