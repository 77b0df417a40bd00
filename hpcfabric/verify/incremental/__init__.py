"""The union proof of a change: ``delta.ProofState`` walks only what a repair changed."""
