"""The union proof (``proof.prove``): delivery and deadlock freedom under any set of paused ports."""
